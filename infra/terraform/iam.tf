# One role per function, least privilege (mirrors GRANTS/LISTS/INVOKES/WRITES in infra/cdk/squall_infra/stack.py;
# the write locals are in writes.tf). tests/infra/test_iam_enforced.py runs Squall under IAM enforcement with
# exactly these statements. No role touches results/: results live under queries/<id>/.

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "fn" {
  for_each           = local.function_names
  name_prefix        = "${substr(each.value, 0, 32)}-"
  description        = "Squall ${each.key} function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "fn" {
  for_each = local.function_names
  name     = "squall-${each.key}"
  role     = aws_iam_role.fn[each.key].id
  policy = {
    worker = data.aws_iam_policy_document.worker.json
    driver = data.aws_iam_policy_document.driver.json
    api    = data.aws_iam_policy_document.api.json
  }[each.key]

  lifecycle {
    precondition {
      condition     = length(local.output_conflicts) == 0
      error_message = "output_prefixes overlap Squall's own areas of its bucket (data_prefix, exchange/, results/, queries/): ${join(", ", local.output_conflicts)}."
    }
  }
}

data "aws_iam_policy_document" "worker" {
  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["worker"].arn}:*"]
  }
  statement {
    sid       = "S3Data"
    actions   = ["s3:GetObject"]
    resources = local.data_object_arns
  }
  statement {
    sid       = "S3Exchange"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"]
    resources = ["${local.bucket_arn}/exchange/*"]
  }
  statement {
    sid       = "S3ListPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = sort(distinct([var.data_prefix, "${var.data_prefix}*", "exchange/", "exchange/*"]))
    }
  }
  dynamic "statement" {
    for_each = local.data_locations
    content {
      sid       = "S3ListDataBucket${statement.key}"
      actions   = ["s3:ListBucket"]
      resources = ["arn:${local.partition}:s3:::${statement.value.bucket}"]
      dynamic "condition" {
        for_each = statement.value.prefix == "" ? [] : [statement.value.prefix]
        content {
          test     = "StringLike"
          variable = "s3:prefix"
          values   = [condition.value, "${condition.value}*"]
        }
      }
    }
  }
  dynamic "statement" {
    for_each = length(local.output_locations) > 0 ? [1] : []
    content {
      sid       = "S3WriteStaging"
      actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
      resources = local.staging_object_arns
    }
  }
  statement {
    sid       = "InvokeSquallFunctions"
    actions   = ["lambda:InvokeFunction"]
    resources = [local.function_arns["worker"], "${local.function_arns["worker"]}:*"]
  }
  dynamic "statement" {
    for_each = var.tracing ? [1] : []
    content {
      sid       = "XRay"
      actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
      resources = ["*"]
    }
  }
}

data "aws_iam_policy_document" "driver" {
  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["driver"].arn}:*"]
  }
  statement {
    sid       = "S3Data"
    actions   = ["s3:GetObject"]
    resources = local.data_object_arns
  }
  statement {
    sid       = "S3Exchange"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.bucket_arn}/exchange/*"]
  }
  statement {
    sid       = "S3Queries"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.bucket_arn}/queries/*"]
  }
  statement {
    sid       = "S3ListPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = sort(distinct([var.data_prefix, "${var.data_prefix}*", "exchange/", "exchange/*", "queries/", "queries/*"]))
    }
  }
  dynamic "statement" {
    for_each = local.data_locations
    content {
      sid       = "S3ListDataBucket${statement.key}"
      actions   = ["s3:ListBucket"]
      resources = ["arn:${local.partition}:s3:::${statement.value.bucket}"]
      dynamic "condition" {
        for_each = statement.value.prefix == "" ? [] : [statement.value.prefix]
        content {
          test     = "StringLike"
          variable = "s3:prefix"
          values   = [condition.value, "${condition.value}*"]
        }
      }
    }
  }
  dynamic "statement" {
    for_each = length(local.output_locations) > 0 ? [1] : []
    content {
      sid       = "S3WriteOutputs"
      actions   = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"]
      resources = local.output_object_arns
    }
  }
  dynamic "statement" {
    for_each = local.output_locations
    content {
      sid       = "S3ListOutput${statement.key}"
      actions   = ["s3:ListBucket"]
      resources = ["arn:${local.partition}:s3:::${statement.value.bucket}"]
      dynamic "condition" {
        for_each = statement.value.prefix == "" ? [] : [statement.value.prefix]
        content {
          test     = "StringLike"
          variable = "s3:prefix"
          values   = [condition.value, "${condition.value}*"]
        }
      }
    }
  }
  statement {
    sid     = "InvokeSquallFunctions"
    actions = ["lambda:InvokeFunction"]
    resources = [
      local.function_arns["worker"], "${local.function_arns["worker"]}:*",
      local.function_arns["driver"], "${local.function_arns["driver"]}:*",
    ]
  }
  dynamic "statement" {
    for_each = var.tracing ? [1] : []
    content {
      sid       = "XRay"
      actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
      resources = ["*"]
    }
  }
}

data "aws_iam_policy_document" "api" {
  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["api"].arn}:*"]
  }
  statement {
    sid       = "S3Queries"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.bucket_arn}/queries/*"]
  }
  statement {
    sid       = "S3ListPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["queries/", "queries/*"]
    }
  }
  statement {
    sid       = "InvokeSquallFunctions"
    actions   = ["lambda:InvokeFunction"]
    resources = [local.function_arns["driver"], "${local.function_arns["driver"]}:*"]
  }
  dynamic "statement" {
    for_each = var.tracing ? [1] : []
    content {
      sid       = "XRay"
      actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
      resources = ["*"]
    }
  }
}
