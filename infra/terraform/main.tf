# Squall in your own AWS account: the Terraform twin of infra/cdk (same resources, names, grants).

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  prefix    = coalesce(var.function_name_prefix, var.stack_name)
  partition = data.aws_partition.current.partition
  repo      = abspath("${path.module}/../..")

  exchange_prefix = "exchange/"
  results_prefix  = "results/"
  queries_prefix  = "queries/"

  create_bucket = var.bucket_name == null
  bucket_name   = local.create_bucket ? aws_s3_bucket.this[0].bucket : var.bucket_name
  bucket_arn    = "arn:${local.partition}:s3:::${local.bucket_name}"

  # extra read-only data locations: "bucket" or "bucket/prefix"
  data_locations = [
    for item in var.data_buckets : {
      bucket = regex("^(?:s3://)?([^/]+)/?(.*)$", item)[0]
      prefix = (
        trimsuffix(regex("^(?:s3://)?([^/]+)/?(.*)$", item)[1], "/") == "" ? "" :
        "${trimsuffix(regex("^(?:s3://)?([^/]+)/?(.*)$", item)[1], "/")}/"
      )
    }
  ]
  data_object_arns = concat(
    ["${local.bucket_arn}/${var.data_prefix}*"],
    [for loc in local.data_locations : "arn:${local.partition}:s3:::${loc.bucket}/${loc.prefix}*"],
  )

  function_names = {
    worker = "${local.prefix}-worker"
    driver = "${local.prefix}-driver"
    api    = "${local.prefix}-api"
  }
  function_arns = {
    for role, name in local.function_names :
    role => "arn:${local.partition}:lambda:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:function:${name}"
  }
}
