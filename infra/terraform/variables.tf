# Same parameters as the CDK app (infra/cdk): variable = CDK context key in snake_case, same defaults.

variable "stack_name" {
  description = "Name of the deployment; prefixes the function names (like the CDK stack name)."
  type        = string
  default     = "Squall"
  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{0,100}$", var.stack_name))
    error_message = "stack_name: letters, digits and -, starting with a letter."
  }
}

variable "architecture" {
  description = "Lambda architecture, arm64 or x86_64 (the layer must match)."
  type        = string
  default     = "arm64"
  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be arm64 or x86_64."
  }
}

variable "worker_memory_mb" {
  description = "Worker memory (MB); Lambda gives ~1 vCPU per 1,769 MB."
  type        = number
  default     = 4096
  validation {
    condition     = var.worker_memory_mb >= 128 && var.worker_memory_mb <= 10240
    error_message = "worker_memory_mb must be 128..10240."
  }
}

variable "driver_memory_mb" {
  description = "Driver memory (MB)."
  type        = number
  default     = 1024
  validation {
    condition     = var.driver_memory_mb >= 128 && var.driver_memory_mb <= 10240
    error_message = "driver_memory_mb must be 128..10240."
  }
}

variable "api_memory_mb" {
  description = "API function memory (MB)."
  type        = number
  default     = 512
  validation {
    condition     = var.api_memory_mb >= 128 && var.api_memory_mb <= 10240
    error_message = "api_memory_mb must be 128..10240."
  }
}

variable "timeout_seconds" {
  description = "Worker timeout (s), at most 900."
  type        = number
  default     = 300
  validation {
    condition     = var.timeout_seconds >= 1 && var.timeout_seconds <= 900
    error_message = "timeout_seconds must be 1..900."
  }
}

variable "driver_timeout_seconds" {
  description = "Driver timeout (s), at least the worker timeout."
  type        = number
  default     = 900
  validation {
    condition     = var.driver_timeout_seconds >= 1 && var.driver_timeout_seconds <= 900
    error_message = "driver_timeout_seconds must be 1..900 (and at least timeout_seconds)."
  }
}

variable "worker_ephemeral_storage_mb" {
  description = "Worker /tmp size (MB) for spills."
  type        = number
  default     = 2048
  validation {
    condition     = var.worker_ephemeral_storage_mb >= 512 && var.worker_ephemeral_storage_mb <= 10240
    error_message = "worker_ephemeral_storage_mb must be 512..10240."
  }
}

variable "max_workers" {
  description = "Upper bound on workers per query (SQUALL_MAX_WORKERS)."
  type        = number
  default     = 64
}

variable "reserved_concurrency" {
  description = "Reserved concurrency of the worker function; null = use the account pool."
  type        = number
  default     = null
}

variable "service_settings" {
  description = "The service's [service] settings as a JSON object (SQUALL_SERVICE): admission limits max_running, max_queued, user_running, user_queued (squall/service/README.md)."
  type        = string
  default     = "{}"
  validation {
    condition     = can(keys(jsondecode(var.service_settings)))
    error_message = "service_settings must be a JSON object, e.g. {\"max_running\": 10}."
  }
}

variable "users" {
  description = "The deployed API's users as a JSON object (SQUALL_USERS, the API function only): {name: {iam_principal, role, max_running, max_queued, max_bytes_scanned, catalogs, ...}} (squall/service/README.md); {} = every IAM principal the API lets in, with the [service] limits."
  type        = string
  default     = "{}"
  validation {
    condition     = can(keys(jsondecode(var.users)))
    error_message = "users must be a JSON object, e.g. {\"alice\": {\"iam_principal\": \"arn:aws:iam::123456789012:user/alice\"}}."
  }
}

variable "lambda_concurrency" {
  description = "Concurrent executions the queries may use (SQUALL_CONCURRENCY): the account's limit, or the worker's reserved_concurrency; max_running defaults to it // (1 + max_workers)."
  type        = number
  default     = 1000
  validation {
    condition     = var.lambda_concurrency >= 1
    error_message = "lambda_concurrency must be at least 1."
  }
}

variable "bucket_name" {
  description = "Existing bucket to use; null = create one (lifecycle rules only on a created bucket)."
  type        = string
  default     = null
}

variable "data_prefix" {
  description = "Prefix of the Parquet data in the bucket (read-only for Squall)."
  type        = string
  default     = "data/"
  validation {
    condition     = can(regex("/$", var.data_prefix))
    error_message = "data_prefix must end with /."
  }
}

variable "data_buckets" {
  description = "More read-only data locations: bucket or bucket/prefix."
  type        = list(string)
  default     = []
}

variable "output_prefixes" {
  description = "Where writes may go (COPY, CREATE TABLE AS, INSERT, UNLOAD): s3://bucket/prefix/ locations; [] = every write refused, no write permission."
  type        = list(string)
  default     = []
  validation {
    condition = alltrue([
      for p in var.output_prefixes : can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(?:[A-Za-z0-9!_'()=+-][A-Za-z0-9!_.'()=+-]*/)*$", p))
    ]) && length(distinct(var.output_prefixes)) == length(var.output_prefixes)
    error_message = "output_prefixes: each must look like s3://bucket/prefix/ (ends with /; folders of letters, digits and !_.'()=+-, none starting with '.'), none listed twice."
  }
}

variable "exchange_ttl_days" {
  description = "Days before exchange/ objects expire."
  type        = number
  default     = 1
}

variable "results_ttl_days" {
  description = "Days before results/ and queries/ objects expire."
  type        = number
  default     = 7
}

variable "auth_mode" {
  description = "API authorization: IAM (SigV4) or API_KEY (x-api-key header)."
  type        = string
  default     = "IAM"
  validation {
    condition     = contains(["IAM", "API_KEY"], var.auth_mode)
    error_message = "auth_mode must be IAM or API_KEY."
  }
}

variable "log_retention_days" {
  description = "CloudWatch Logs retention of functions and API access logs."
  type        = number
  default     = 30
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts."
  }
}

variable "tracing" {
  description = "X-Ray tracing of functions and API stage."
  type        = bool
  default     = false
}

variable "throttle_rate_limit" {
  description = "API steady-state requests per second."
  type        = number
  default     = 20
}

variable "throttle_burst_limit" {
  description = "API burst requests."
  type        = number
  default     = 40
}

variable "api_gateway_cloudwatch_role" {
  description = "Set the account's API Gateway CloudWatch role (needed once per region for access logs)."
  type        = bool
  default     = true
}

variable "layer_path" {
  description = "Dependency layer zip; null = build/layer-<architecture>.zip (make layer)."
  type        = string
  default     = null
}

variable "function_name_prefix" {
  description = "Prefix of function names; null = stack_name."
  type        = string
  default     = null
}

# Terraform only -------------------------------------------------------------------------------------

variable "function_code_dir" {
  description = "Staged squall package (make stage); null = build/function-code."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource that takes them."
  type        = map(string)
  default     = {}
}
