# REST API (regional) proxying everything to the API function; IAM or API-key auth.

resource "aws_api_gateway_rest_api" "this" {
  name           = "${local.prefix}-api"
  description    = "Squall SQL query API"
  api_key_source = "HEADER"
  # results come back as Arrow IPC or Parquet bytes
  binary_media_types = ["application/vnd.apache.arrow.stream", "application/vnd.apache.parquet", "application/octet-stream"]
  endpoint_configuration {
    types = ["REGIONAL"]
  }
  lifecycle {
    create_before_destroy = true
  }
  tags = var.tags
}

resource "aws_api_gateway_resource" "proxy" {
  rest_api_id = aws_api_gateway_rest_api.this.id
  parent_id   = aws_api_gateway_rest_api.this.root_resource_id
  path_part   = "{proxy+}"
}

locals {
  api_resources = {
    root  = aws_api_gateway_rest_api.this.root_resource_id
    proxy = aws_api_gateway_resource.proxy.id
  }
}

resource "aws_api_gateway_method" "any" {
  for_each         = local.api_resources
  rest_api_id      = aws_api_gateway_rest_api.this.id
  resource_id      = each.value
  http_method      = "ANY"
  authorization    = var.auth_mode == "IAM" ? "AWS_IAM" : "NONE"
  api_key_required = var.auth_mode == "API_KEY"
}

resource "aws_api_gateway_integration" "any" {
  for_each                = local.api_resources
  rest_api_id             = aws_api_gateway_rest_api.this.id
  resource_id             = each.value
  http_method             = aws_api_gateway_method.any[each.key].http_method
  type                    = "AWS_PROXY"
  integration_http_method = "POST"
  uri                     = aws_lambda_function.fn["api"].invoke_arn
}

resource "aws_lambda_permission" "api" {
  statement_id  = "AllowApiGatewayInvoke"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.fn["api"].function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_api_gateway_rest_api.this.execution_arn}/*/*"
}

resource "aws_api_gateway_deployment" "this" {
  rest_api_id = aws_api_gateway_rest_api.this.id
  triggers = {
    redeployment = sha1(jsonencode([aws_api_gateway_method.any, aws_api_gateway_integration.any]))
  }
  lifecycle {
    create_before_destroy = true
  }
  depends_on = [aws_api_gateway_integration.any]
}

resource "aws_cloudwatch_log_group" "api_access" {
  name              = "/aws/apigateway/${local.prefix}-api-access"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_api_gateway_stage" "v1" {
  stage_name           = "squall"
  rest_api_id          = aws_api_gateway_rest_api.this.id
  deployment_id        = aws_api_gateway_deployment.this.id
  xray_tracing_enabled = var.tracing
  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api_access.arn
    format = jsonencode({
      requestId      = "$context.requestId"
      ip             = "$context.identity.sourceIp"
      user           = "$context.identity.user"
      caller         = "$context.identity.caller"
      requestTime    = "$context.requestTime"
      httpMethod     = "$context.httpMethod"
      resourcePath   = "$context.resourcePath"
      status         = "$context.status"
      protocol       = "$context.protocol"
      responseLength = "$context.responseLength"
    })
  }
  tags       = var.tags
  depends_on = [aws_api_gateway_account.this]
}

resource "aws_api_gateway_method_settings" "all" {
  rest_api_id = aws_api_gateway_rest_api.this.id
  stage_name  = aws_api_gateway_stage.v1.stage_name
  method_path = "*/*"
  settings {
    metrics_enabled        = true
    logging_level          = "ERROR" # errors only: INFO would log request bodies (SQL text)
    data_trace_enabled     = false
    throttling_rate_limit  = var.throttle_rate_limit
    throttling_burst_limit = var.throttle_burst_limit
  }
}

# Account-wide (per region) role that lets API Gateway write the access logs.
data "aws_iam_policy_document" "apigw_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["apigateway.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "apigw_cloudwatch" {
  count              = var.api_gateway_cloudwatch_role ? 1 : 0
  name_prefix        = "${substr(local.prefix, 0, 20)}-apigw-logs-"
  assume_role_policy = data.aws_iam_policy_document.apigw_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "apigw_cloudwatch" {
  count      = var.api_gateway_cloudwatch_role ? 1 : 0
  role       = aws_iam_role.apigw_cloudwatch[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"
}

resource "aws_api_gateway_account" "this" {
  count               = var.api_gateway_cloudwatch_role ? 1 : 0
  cloudwatch_role_arn = aws_iam_role.apigw_cloudwatch[0].arn
  depends_on          = [aws_iam_role_policy_attachment.apigw_cloudwatch]
}

# API-key mode: a usage plan with the same throttling, and one key.
resource "aws_api_gateway_usage_plan" "this" {
  count = var.auth_mode == "API_KEY" ? 1 : 0
  name  = "${local.prefix}-usage"
  api_stages {
    api_id = aws_api_gateway_rest_api.this.id
    stage  = aws_api_gateway_stage.v1.stage_name
  }
  throttle_settings {
    rate_limit  = var.throttle_rate_limit
    burst_limit = var.throttle_burst_limit
  }
  tags = var.tags
}

resource "aws_api_gateway_api_key" "this" {
  count = var.auth_mode == "API_KEY" ? 1 : 0
  name  = "${local.prefix}-key"
  tags  = var.tags
}

resource "aws_api_gateway_usage_plan_key" "this" {
  count         = var.auth_mode == "API_KEY" ? 1 : 0
  key_id        = aws_api_gateway_api_key.this[0].id
  key_type      = "API_KEY"
  usage_plan_id = aws_api_gateway_usage_plan.this[0].id
}
