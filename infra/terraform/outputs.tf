# Same outputs as the CDK stack (CfnOutput ApiUrl = api_url, ...).

output "api_url" {
  description = "squall.connect(<this>, auth=...)"
  value       = "${aws_api_gateway_stage.v1.invoke_url}/"
}

output "bucket_name" {
  value = local.bucket_name
}

output "data_prefix" {
  value = "s3://${local.bucket_name}/${var.data_prefix}"
}

output "auth_mode" {
  value = var.auth_mode
}

output "worker_function_name" {
  value = aws_lambda_function.fn["worker"].function_name
}

output "driver_function_name" {
  value = aws_lambda_function.fn["driver"].function_name
}

output "api_function_name" {
  value = aws_lambda_function.fn["api"].function_name
}

output "layer_version_arn" {
  value = aws_lambda_layer_version.deps.arn
}

output "api_key_id" {
  description = "aws apigateway get-api-key --include-value --api-key <this> (API_KEY mode only)"
  value       = var.auth_mode == "API_KEY" ? aws_api_gateway_api_key.this[0].id : null
}
