# Writes (COPY, CREATE TABLE AS, INSERT, UNLOAD) go only under var.output_prefixes; mirrors WRITES in
# infra/cdk/squall_infra/stack.py. Workers stage their parts under <prefix>.squall-staging/; the driver
# commits (copy staged -> final, commit listing, deletes), so only it reads, deletes and lists there.

locals {
  staging_folder = ".squall-staging/"

  # "s3://bucket/a/b/" -> {bucket = "bucket", prefix = "a/b/"} (the variable's validation fixed the form)
  output_locations = [
    for item in var.output_prefixes : {
      bucket = regex("^s3://([^/]+)/(.*)$", item)[0]
      prefix = regex("^s3://([^/]+)/(.*)$", item)[1]
    }
  ]
  staging_object_arns = [
    for loc in local.output_locations : "arn:${local.partition}:s3:::${loc.bucket}/${loc.prefix}${local.staging_folder}*"
  ]
  output_object_arns = [
    for loc in local.output_locations : "arn:${local.partition}:s3:::${loc.bucket}/${loc.prefix}*"
  ]
  # the driver's connections take writable=[...] from it; absent = every write refused
  write_environment = length(var.output_prefixes) > 0 ? { SQUALL_WRITABLE = join(",", var.output_prefixes) } : {}

  # output prefixes overlapping Squall's own areas of an existing bucket (refused: see the precondition in iam.tf)
  own_areas = [var.data_prefix, local.exchange_prefix, local.results_prefix, local.queries_prefix]
  output_conflicts = [
    for i, loc in local.output_locations : var.output_prefixes[i]
    if loc.bucket == var.bucket_name && anytrue([for a in local.own_areas : startswith(a, loc.prefix) || startswith(loc.prefix, a)])
  ]
}
