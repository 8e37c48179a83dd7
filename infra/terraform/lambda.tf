# Dependency layer and the worker, driver and API functions.

locals {
  layer_path = coalesce(var.layer_path, "${local.repo}/build/layer-${var.architecture}.zip")
  code_dir   = coalesce(var.function_code_dir, "${local.repo}/build/function-code")

  handlers = {
    worker = "squall.functions.worker.handler"
    driver = "squall.functions.driver.handler"
    api    = "squall.functions.api.handler"
  }
  sizes = {
    worker = { memory = var.worker_memory_mb, timeout = var.timeout_seconds, storage = var.worker_ephemeral_storage_mb }
    driver = { memory = var.driver_memory_mb, timeout = var.driver_timeout_seconds, storage = 512 }
    api    = { memory = var.api_memory_mb, timeout = 29, storage = 512 } # REST API integration limit
  }
  environment = {
    SQUALL_PLATFORM               = "lambda"
    SQUALL_BUCKET                 = local.bucket_name
    SQUALL_DATA_PREFIX            = var.data_prefix
    SQUALL_EXCHANGE_PREFIX        = "exchange/"
    SQUALL_RESULTS_PREFIX         = "results/"
    SQUALL_QUERIES_PREFIX         = "queries/"
    SQUALL_WORKER_FUNCTION        = local.function_names["worker"]
    SQUALL_DRIVER_FUNCTION        = local.function_names["driver"]
    SQUALL_MAX_WORKERS            = tostring(var.max_workers)
    SQUALL_WORKER_MEMORY_MB       = tostring(var.worker_memory_mb)
    SQUALL_WORKER_TIMEOUT_SECONDS = tostring(var.timeout_seconds)
    SQUALL_RESULTS_TTL_DAYS       = tostring(var.results_ttl_days)
    SQUALL_SERVICE                = var.service_settings # admission limits (squall/service/lambda_admission.py)
    SQUALL_CONCURRENCY            = tostring(var.lambda_concurrency)
    POWERTOOLS_SERVICE_NAME       = "squall"
    POWERTOOLS_METRICS_NAMESPACE  = "Squall"
    POWERTOOLS_LOG_LEVEL          = "INFO"
    POWERTOOLS_TRACE_DISABLED     = var.tracing ? "false" : "true"
  }
}

data "archive_file" "code" {
  type        = "zip"
  source_dir  = local.code_dir
  output_path = "${local.repo}/build/function-code.zip"
}

resource "aws_lambda_layer_version" "deps" {
  layer_name               = "${local.prefix}-dependencies"
  description              = "Squall runtime dependencies (duckdb, pyarrow, sqlglot, ...) for ${var.architecture}"
  filename                 = local.layer_path
  source_code_hash         = filebase64sha256(local.layer_path)
  compatible_runtimes      = ["python3.12"]
  compatible_architectures = [var.architecture]
}

resource "aws_cloudwatch_log_group" "fn" {
  for_each          = local.function_names
  name              = "/aws/lambda/${each.value}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_lambda_function" "fn" {
  for_each         = local.handlers
  function_name    = local.function_names[each.key]
  description      = "Squall ${each.key}"
  role             = aws_iam_role.fn[each.key].arn
  runtime          = "python3.12"
  architectures    = [var.architecture]
  handler          = each.value
  filename         = data.archive_file.code.output_path
  source_code_hash = data.archive_file.code.output_base64sha256
  layers           = [aws_lambda_layer_version.deps.arn]
  memory_size      = local.sizes[each.key].memory
  timeout          = local.sizes[each.key].timeout

  reserved_concurrent_executions = each.key == "worker" && var.reserved_concurrency != null ? var.reserved_concurrency : -1

  ephemeral_storage {
    size = local.sizes[each.key].storage
  }

  environment {
    variables = merge(
      local.environment, local.write_environment, { SQUALL_ROLE = each.key },
      # who may use the API and their own limits (squall/service/users.py): the API function only
      each.key == "api" && var.users != "{}" ? { SQUALL_USERS = var.users } : {},
    )
  }

  tracing_config {
    mode = var.tracing ? "Active" : "PassThrough"
  }

  logging_config {
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.fn[each.key].name
  }

  tags       = var.tags
  depends_on = [aws_iam_role_policy.fn]
}

# The driver retries failed workers itself (exchange writes are idempotent); Lambda's own
# asynchronous retries would come minutes later and only duplicate work.
resource "aws_lambda_function_event_invoke_config" "fn" {
  for_each               = local.handlers
  function_name          = aws_lambda_function.fn[each.key].function_name
  qualifier              = "$LATEST"
  maximum_retry_attempts = 0
}
