"""Invariants of template.yaml, checked by walking the template as YAML.

Run by `infra/test.sh` (step "template") with the pytest of `.local/venv-template`:

    .local/venv-template/bin/python -m pytest -q infra/deploy/test_template.py

Each test is one invariant; a failure names the invariant, then one line per offending
resource. The tables below are the contract between the Rust code and the template:

* SDK_CALLS: the AWS calls each function's code makes, read off the code (the adapters in
  shared/src/aws/, the pipeline in shared/src/process.rs for the functions that run it, the
  per-function modules). The roles must grant exactly what these calls need, on exactly those
  resources: a new grant fails the test, and so does a new call, because the test also
  re-derives the calls from the source (`store.X(` / `ledger.X(` / `queue.X(` / `client.X()`,
  and per adapter method the SDK operations it sends) and compares. Two functions are one
  binary in two modes (publish and maintenance): their calls are read from the fns each mode
  reaches (ENTRY_POINTS), not from the whole crate.
* LIBRARY_CALLS: AWS calls a library makes with a client of its own (delta-rs's S3 client in
  the publish and maintenance functions), which the derivation cannot see: declared with the
  reason, granted like SDK_CALLS, and kept true by test_library_calls_still_describe_the_code.
* PLATFORM_GRANTS: what Lambda, SQS, KMS and CloudWatch Logs need on the function's behalf
  (log delivery, queue polling, dead letters, encrypted environment / queues / table).
* ENV: the environment variables each function reads; the template must set exactly these.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from functools import lru_cache

import pytest
from cfnlint.decode import cfn_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

FUNCTIONS = ("IngestFunction", "ReconcileFunction", "BackfillFunction", "PublishFunction", "MaintainFunction")

# ---------------------------------------------------------------------------------------------
# The code's AWS calls, per function: (service, operation, resource). Resources:
#   landing / lake   objects of the landing / lake bucket (the sources document may name no
#                    other bucket: the SourcesConfig parameter says so and the default
#                    document is checked below)
#   inventory        objects of the bucket named by InventoryBucketName, granted only when the
#                    parameter is set (CONDITIONAL_KINDS)
#   delta_log        objects of the lake under a `_delta_log/` folder: the Delta Lake logs of
#                    the tables rooted at the outputs' prefixes (any prefix, so `*_delta_log/*`)
#   compacted        compacted table files of the lake, `<table root>[dt=…/]compacted-<uuid>.parquet`
#                    (tidemark::compact::FILE_PREFIX; any prefix, so `*compacted-*.parquet`)
#   selection        selections of a table merged by key (shared/delta/src/merge.rs),
#                    `<table root>[dt=…/]<output name>.m<16 hex>.<8 hex>.parquet`, so
#                    `*.m????????????????.????????.parquet`
#   lake_parquet     Parquet files of the lake (`*.parquet`): a table's data files, which VACUUM
#                    deletes (the table roots are in the sources document, not the template)
#   table / index    the ledger table / its by_source index
#   work_queue       the queue named by the function's TIDEMARK_BACKFILL_QUEUE_URL
#   reconcile_queue  the queue named by the function's TIDEMARK_RECONCILE_QUEUE_URL
#   self             the function itself
# ---------------------------------------------------------------------------------------------
PIPELINE_CALLS = {
    # shared/src/process.rs (and process/), Pipeline::handle_event / handle_item: the
    # per-object path of ingest (events and backfill work items) and of reconcile's repairs.
    ("s3", "HeadObject", "landing"),  # a delete target: is the key really gone?
    ("s3", "GetObject", "landing"),  # the source version, pinned with If-Match
    ("s3", "PutObject", "lake"),  # output <= 8 MiB, If-None-Match / If-Match
    ("s3", "CreateMultipartUpload", "lake"),  # larger outputs ...
    ("s3", "UploadPart", "lake"),
    ("s3", "CompleteMultipartUpload", "lake"),  # ... completed under the same condition
    ("s3", "AbortMultipartUpload", "lake"),  # a failed conversion's upload
    ("s3", "HeadObject", "lake"),  # whose output is there after a 412
    ("s3", "DeleteObject", "lake"),  # replaced outputs, on_delete = delete
    ("dynamodb", "GetItem", "table"),  # Ledger::get (paused / disabled sources)
    ("dynamodb", "PutItem", "table"),  # Ledger::create / replace: claim, commit, fail
}
SDK_CALLS = {
    "IngestFunction": PIPELINE_CALLS
    | {
        # shared/src/ingest.rs: a message of backfill work items whose items have all ended
        ("dynamodb", "TransactWriteItems", "table"),  # finish_message: mark (Put) + counter (Update)
        ("dynamodb", "UpdateItem", "table"),  # add_failures: a counter shard, ADD
        # functions/ingest/src/main.rs, at cold start: ingest::warn_orphaned_sources
        ("dynamodb", "Query", "index"),  # Ledger::source_ids: by_source, partition ~sources
    },
    "ReconcileFunction": PIPELINE_CALLS
    | {
        # shared/src/reconcile.rs, shared/src/reconcile/ (parts.rs, outputs.rs)
        ("s3", "ListObjectsV2", "landing"),  # the window's prefixes; a split window's keys, once
        # outputs' footers and sum columns (ranged); the window state; a part's result (merge)
        ("s3", "GetObject", "lake"),
        # reports (JSON, HTML; a split window's merged report); the window state (If-Match);
        # a part's result, <reports prefix>_runs/<job>/part-NNNNNN.json (If-None-Match)
        ("s3", "PutObject", "lake"),
        # Ledger::list_range: by_source, bounded on the key; list_jobs: the jobs (~jobs shards)
        ("dynamodb", "Query", "index"),
        # A split window's job (ledger table, like the backfill jobs): create_job / replace_job
        # are PutItem (PIPELINE_CALLS), get_job a GetItem and then, like list_jobs, the 16
        # counter items with BatchGetItem; finish_message counts a checked part.
        ("dynamodb", "BatchGetItem", "table"),
        ("dynamodb", "TransactWriteItems", "table"),  # finish_message: mark (Put) + counter (Update)
        ("sqs", "SendMessageBatch", "reconcile_queue"),  # queue.send: the parts, one a message
    },
    # The planner only: it lists and enqueues, and never runs the per-object path.
    "BackfillFunction": {
        # shared/src/backfill.rs, shared/src/inventory.rs, functions/backfill/src
        ("s3", "ListObjectsV2", "landing"),  # list / list_after (StartAfter = the job's cursor)
        ("s3", "GetObject", "inventory"),  # an S3 Inventory report: manifest.json, data files
        ("dynamodb", "BatchGetItem", "table"),  # get_many: a page's records; get_job's counters
        ("dynamodb", "GetItem", "table"),  # get_job: the job record
        ("dynamodb", "PutItem", "table"),  # create_job / replace_job (conditional on rev)
        ("sqs", "SendMessageBatch", "work_queue"),  # queue.send: the work items
        ("lambda", "Invoke", "self"),  # the next planner call, InvocationType=Event
    },
    # The Delta Lake committer: reads the ledger and the outputs, never writes either; writes
    # only the compacted files it rewrites and the selections of merged tables.
    "PublishFunction": {
        # shared/delta/src/lib.rs (tidemark-delta, the committer library)
        ("dynamodb", "BatchGetItem", "table"),  # get_many_latest: the changed keys, ConsistentRead
        ("dynamodb", "Query", "index"),  # Ledger::list: a sweep lists the source's records
        # shared/src/reconcile/outputs.rs read_footer: a new output's footer, a compacted
        # file's manifest (ranged GET; a HEAD answers the 416 of an empty object);
        # read_file: a compacted file to rewrite, whole
        ("s3", "GetObject", "lake"),
        ("s3", "HeadObject", "lake"),
        # rewrite -> write_compacted -> put_table_file: a compacted file without a replaced or
        # deleted object's rows, a new name PUT with If-None-Match
        ("s3", "PutObject", "compacted"),
        # merge.rs write_selection -> put_table_file: an object's winning rows in a table
        # merged by key, a new name PUT with If-None-Match
        ("s3", "PutObject", "selection"),
    },
    # The same crate in maintenance mode (handler.rs maintain: Publisher::compact, ::maintain).
    "MaintainFunction": {
        ("dynamodb", "Query", "index"),  # Ledger::list: unsettled records (compact), named files (VACUUM)
        # read_file: the files merged, whole; manifest (read_footer): a compacted input's entries
        ("s3", "GetObject", "lake"),
        ("s3", "HeadObject", "lake"),
        ("s3", "PutObject", "compacted"),  # write_compacted -> put_table_file: the merged file
        # maintain: the files VACUUM's dry run lists and the ledger does not name
        ("s3", "DeleteObject", "lake_parquet"),
        # catalog_step -> Catalog::sync (shared/delta/src/catalog.rs): each source's table
        ("glue", "GetTable", "glue_table"),
        ("glue", "CreateTable", "glue_table"),
        ("glue", "UpdateTable", "glue_table"),
    },
}

# AWS calls a library makes with a client of its own, not through our adapters: the
# derivation from the source cannot see them, so each is declared here with the reason. They
# are granted like SDK_CALLS; test_library_calls_still_describe_the_code checks that the code
# still uses the library the way the reasons say.
LIBRARY_CALLS = {
    "PublishFunction": {
        # delta-rs (deltalake + deltalake-aws, object_store's S3 client), shared/delta/src/
        # delta.rs: open / load / update_state / commit on s3://<output bucket>/<output prefix>.
        ("s3", "ListObjectsV2", "lake"): "delta-rs lists <table root>/_delta_log/ for the latest version",
        ("s3", "GetObject", "lake"): "delta-rs reads _delta_log/_last_checkpoint, the commits and any checkpoint",
        ("s3", "PutObject", "delta_log"): "delta-rs commits _delta_log/<version>.json with If-None-Match "
        "(PutMode::Create, deltalake-aws 1.x's default log store); version 0 creates the table",
    },
    "MaintainFunction": {
        # The same, plus maintain.rs: checkpoints::create_checkpoint, cleanup_expired_logs_for,
        # and VACUUM as a dry run (the deletes are ours, SDK_CALLS).
        ("s3", "ListObjectsV2", "lake"): "delta-rs lists <table root>/_delta_log/ (latest version, log cleanup) "
        "and, for VACUUM (full mode), every file under the table root",
        ("s3", "GetObject", "lake"): "delta-rs reads _delta_log/_last_checkpoint, the commits and the checkpoints",
        ("s3", "PutObject", "delta_log"): "delta-rs commits the compactions (_delta_log/<version>.json, "
        "If-None-Match) and writes the checkpoint (_delta_log/<version>.checkpoint.parquet, _last_checkpoint)",
        ("s3", "DeleteObject", "delta_log"): "delta-rs's log cleanup deletes expired _delta_log/ files "
        "(object_store delete_stream: DeleteObjects, authorized as s3:DeleteObject per key)",
    },
}
# delta-rs operations that read or write more than a commit does, and the LIBRARY_CALLS each
# needs: what each function may run (read from the fns its mode reaches). The publish
# function runs none (its commits are made with checkpoints and log cleanup off, quiet() in
# delta.rs); maintenance runs the first three. OPTIMIZE (compaction is ours), RESTORE and
# cleanup_metadata (the table's own retention) are run by neither.
DELTA_MAINTENANCE_OPS = {
    "create_checkpoint": {("s3", "PutObject", "delta_log")},
    "cleanup_expired_logs_for": {("s3", "ListObjectsV2", "lake"), ("s3", "DeleteObject", "delta_log")},
    "vacuum": {("s3", "ListObjectsV2", "lake")},  # a dry run: lists, deletes nothing
    "optimize": None,
    "restore": None,
    "cleanup_metadata": None,
    "filesystem_check": None,
}
DELTA_MAINTENANCE_RUN = {
    "PublishFunction": set(),
    "MaintainFunction": {"create_checkpoint", "cleanup_expired_logs_for", "vacuum"},
}

# The files that make up each function's code path; the first is the function's own crate.
# The per-object pipeline (COMMON_CODE) is on the path of ingest and reconcile, not of the
# backfill planner.
COMMON_CODE = ["shared/src/process.rs", "shared/src/process", "shared/src/protocol.rs"]
# The Delta committer library (tidemark-delta) the publish and maintenance functions run.
DELTA_CRATE = "shared/delta"
DELTA_SRC = f"{DELTA_CRATE}/src"
FUNCTION_CODE = {
    "IngestFunction": ["functions/ingest/src", "shared/src/ingest.rs", *COMMON_CODE],
    "ReconcileFunction": [
        "functions/reconcile/src",
        "shared/src/reconcile.rs",
        "shared/src/reconcile",
        *COMMON_CODE,
    ],
    "BackfillFunction": ["functions/backfill/src", "shared/src/backfill.rs", "shared/src/inventory.rs"],
    # The committer: its crate, the committer library it runs (tidemark-delta) and the footer
    # reader it shares with reconcile; no pipeline.
    "PublishFunction": ["functions/publish/src", DELTA_SRC, "shared/src/reconcile/outputs.rs"],
    # The same binary in maintenance mode.
    "MaintainFunction": ["functions/publish/src", DELTA_SRC, "shared/src/reconcile/outputs.rs"],
}
# Functions whose binary has modes: the fns each one runs, as (file, fn) roots, and calls cut
# from the graph (file, fn) -> callee names, because a gate in that fn refuses them in this
# function. From the roots, a call `name(` / `.name(` / `path::name(` is followed to every fn
# of that name in the function's files (a shared name over-approximates, never hides a call).
# The gates are checked by test_maintenance_runs_alone_on_its_schedule.
PUBLISH_MAIN = "functions/publish/src/main.rs"
PUBLISH_HANDLER = "functions/publish/src/handler.rs"
ENTRY_POINTS = {
    # Stream batches and sweeps; handle refuses {"maintain"} unless TIDEMARK_MAINTENANCE=1,
    # which the publish function does not set.
    # handle refuses the catalog step (CloudFormation's custom resource) the same way.
    "PublishFunction": {"roots": [(PUBLISH_MAIN, "main")],
                        "cut": {(PUBLISH_HANDLER, "handle"): {"maintain", "catalog_step"}}},
    # {"maintain": {...}}, the only payload its schedule sends (no stream, no sweep), and the
    # deploy's catalog step (CatalogSync's requests): the cold start of main (not the
    # handler's other branches), handler.rs maintain and catalog_step.
    "MaintainFunction": {"roots": [(PUBLISH_MAIN, "main"), (PUBLISH_HANDLER, "maintain"),
                                   (PUBLISH_HANDLER, "catalog_step")],
                         "cut": {(PUBLISH_MAIN, "main"): {"handle"}}},
}
# Files of shared/src that call the ports but are on no function's path, and why.
NOT_ON_A_FUNCTION_PATH = {
    "shared/src/fleet.rs": "the local fleet of the CLI and the test suites (receive / delete / depth)",
    "shared/src/local": "the embedded backends (folder store, SQLite ledger and queue)",
    "shared/src/testing.rs": "helpers of the test suites",
}

# The ports' methods and the SDK operations each one's AWS adapter sends (shared/src/aws/s3.rs,
# dynamodb.rs, sqs.rs), re-derived per method from the adapters by
# test_the_adapters_make_only_known_sdk_calls. Calls are read off the code as `store.X(`,
# `ledger.X(` and `queue.X(`.
STORE_METHODS = {
    "head": ("HeadObject",),
    "get": ("GetObject",),
    # A Range header; a 416 (the range starts past the end of an empty object) is answered
    # by a HEAD. Both are s3:GetObject.
    "get_range": ("GetObject", "HeadObject"),
    "put": ("PutObject",),
    "create_multipart": ("CreateMultipartUpload",),
    "upload_part": ("UploadPart",),
    "complete_multipart": ("CompleteMultipartUpload",),
    "abort_multipart": ("AbortMultipartUpload",),
    "delete": ("DeleteObject",),
    "list": ("ListObjectsV2",),
    "list_after": ("ListObjectsV2",),
}
LEDGER_METHODS = {
    "get": ("GetItem",),
    "get_many": ("BatchGetItem",),  # 100 keys a request
    "get_many_latest": ("BatchGetItem",),  # the same, ConsistentRead: the table committer
    "create": ("PutItem",),
    "replace": ("PutItem",),
    "delete": ("DeleteItem",),  # operator: rewind / reset / forget (CLI)
    "list": ("Query",),  # index by_source
    "list_range": ("Query",),  # index by_source, a key range
    "audit": ("PutItem",),  # operator (CLI)
    "audit_log": ("Scan",),  # operator (CLI)
    "source_mode": ("GetItem",),  # operator (CLI)
    "set_source_mode": ("PutItem",),  # operator (CLI)
    "source_ids": ("Query",),  # index by_source (~sources): ingest's cold start, status, plan
    "unregister_source": ("DeleteItem",),  # operator: rename-source (CLI)
    # Jobs (ports::JobStore, the same adapter and table).
    "create_job": ("PutItem",),
    "replace_job": ("PutItem",),
    "get_job": ("GetItem", "BatchGetItem"),  # the job record, then its 16 counter items
    "list_jobs": ("Query", "BatchGetItem"),  # index by_source (~jobs), then counters (CLI, reports)
    "finish_message": ("TransactWriteItems",),  # mark (Put) + counter shard (Update, ADD)
    "add_failures": ("UpdateItem",),  # a counter shard, ADD
}
QUEUE_METHODS = {
    "send": ("SendMessageBatch",),  # 10 entries a request (a reconcile part: one)
    "receive": ("ReceiveMessage",),  # the local fleet and the CLI only
    "delete": ("DeleteMessage",),  # the local fleet and the CLI only
    "depth": ("GetQueueAttributes",),  # the CLI only
}
PORTS = {  # the name a port goes by in the code -> (service, its method table, its adapter)
    "store": ("s3", STORE_METHODS, "shared/src/aws/s3.rs"),
    "ledger": ("dynamodb", LEDGER_METHODS, "shared/src/aws/dynamodb.rs"),
    "queue": ("sqs", QUEUE_METHODS, "shared/src/aws/sqs.rs"),
}
# Methods called on a variable named like a port that are not the port's: the reconcile
# queue is an Option (`deps.queue.as_deref()` in functions/reconcile/src/handler.rs;
# `queue.filter(|_| config.reports.is_some())` in reconcile.rs handle_with: no split without
# a reports location); the publish function clones and borrows its ports
# (`pipeline.store.clone()`, `self.store.as_ref()`) and names its TableStore (where the Delta
# tables live, shared/delta/src/delta.rs) `store`. Skipped by the derivation; no port
# trait may declare a method of these names (checked), so no port call can hide behind them.
WRAPPER_METHODS = {
    "as_deref": "Option<Arc<dyn WorkQueue>> -> Option<&dyn WorkQueue>",
    "filter": "Option::filter",
    "clone": "Arc::clone of a port",
    "as_ref": "Arc<dyn ObjectStore> -> &dyn ObjectStore",
    "url": "publish's TableStore::url (a table's root)",
    "options": "publish's TableStore::options (the delta-rs S3 store's options)",
}
# SDK calls of the DynamoDB adapter that no Lambda makes: DynamoLedger::ensure_table, for the
# local stack and first-time setup from the CLI.
DYNAMODB_CLI_ONLY = {"CreateTable", "DescribeTable"}

# SDK operation -> IAM actions.
IAM_ACTION = {
    ("glue", "GetTable"): ("glue:GetTable",),
    ("glue", "CreateTable"): ("glue:CreateTable",),
    ("glue", "UpdateTable"): ("glue:UpdateTable",),
    ("s3", "GetObject"): ("s3:GetObject",),
    ("s3", "HeadObject"): ("s3:GetObject",),
    ("s3", "PutObject"): ("s3:PutObject",),
    ("s3", "CreateMultipartUpload"): ("s3:PutObject",),
    ("s3", "UploadPart"): ("s3:PutObject",),
    ("s3", "CompleteMultipartUpload"): ("s3:PutObject",),
    ("s3", "AbortMultipartUpload"): ("s3:AbortMultipartUpload",),
    ("s3", "DeleteObject"): ("s3:DeleteObject",),
    ("s3", "ListObjectsV2"): ("s3:ListBucket",),
    ("dynamodb", "GetItem"): ("dynamodb:GetItem",),
    ("dynamodb", "BatchGetItem"): ("dynamodb:BatchGetItem",),
    ("dynamodb", "PutItem"): ("dynamodb:PutItem",),
    ("dynamodb", "UpdateItem"): ("dynamodb:UpdateItem",),
    ("dynamodb", "DeleteItem"): ("dynamodb:DeleteItem",),
    ("dynamodb", "Query"): ("dynamodb:Query",),
    ("dynamodb", "Scan"): ("dynamodb:Scan",),
    # TransactWriteItems has no IAM action of its own: each action in the transaction is
    # authorized as the operation it stands for (Put -> PutItem, Update -> UpdateItem, Delete ->
    # DeleteItem, ConditionCheck -> ConditionCheckItem), per "Using IAM with DynamoDB
    # transactions", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html.
    # These are the kinds the adapter builds (checked against TRANSACT_ITEM_ACTION below).
    ("dynamodb", "TransactWriteItems"): ("dynamodb:PutItem", "dynamodb:UpdateItem"),
    # The batch actions have no IAM action of their own either: sqs:SendMessage covers
    # SendMessageBatch ("Amazon SQS batch actions",
    # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-batch-api-actions.html).
    ("sqs", "SendMessageBatch"): ("sqs:SendMessage",),
    ("sqs", "ReceiveMessage"): ("sqs:ReceiveMessage",),
    ("sqs", "DeleteMessage"): ("sqs:DeleteMessage",),
    ("sqs", "GetQueueAttributes"): ("sqs:GetQueueAttributes",),
    ("lambda", "Invoke"): ("lambda:InvokeFunction",),
}
# The IAM action of each kind of TransactWriteItem (the builder's method in the Rust SDK).
TRANSACT_ITEM_ACTION = {
    "put": "dynamodb:PutItem",
    "update": "dynamodb:UpdateItem",
    "delete": "dynamodb:DeleteItem",
    "condition_check": "dynamodb:ConditionCheckItem",
}
# The S3 adapter turns a 404 into "no such key" (HeadObject -> None, GetObject -> NotFound)
# and the protocol branches on it; S3 answers 404 rather than 403 for a missing key only to a
# caller with s3:ListBucket on the bucket. So a HEAD / GET on a bucket implies ListBucket on it.
ANSWERS_404 = {"HeadObject", "GetObject"}

# Resource kinds granted only under a template condition: kind -> the condition's name. A
# grant made inside `!If [Cond, statement, !Ref AWS::NoValue]` renders as "<arn> (if Cond)".
CONDITIONAL_KINDS = {"inventory": "ReadInventory"}
# The environment variable naming the work queue (shared/src/aws/mod.rs ENV_BACKFILL_QUEUE).
WORK_QUEUE_ENV = "TIDEMARK_BACKFILL_QUEUE_URL"
# The environment variable naming the reconcile queue (shared/src/aws/mod.rs ENV_RECONCILE_QUEUE).
RECONCILE_QUEUE_ENV = "TIDEMARK_RECONCILE_QUEUE_URL"
# Queue resource kinds -> (the Rust constant, the variable it names): a function's sends go
# to the queue its own environment names.
QUEUE_KINDS = {
    "work_queue": ("ENV_BACKFILL_QUEUE", WORK_QUEUE_ENV),
    "reconcile_queue": ("ENV_RECONCILE_QUEUE", RECONCILE_QUEUE_ENV),
}

KMS_ACTIONS = {
    # the encrypted environment (KmsKeyArn), SQS receive, ledger reads
    "kms:Decrypt",
    # SQS send to the encrypted queues (work items, DLQs); ledger writes
    "kms:GenerateDataKey",
    # DynamoDB's use of a customer managed key on the caller's behalf (kms:ViaService)
    "kms:Encrypt",
    "kms:DescribeKey",
}


def platform_grants(fn: str, res: dict) -> set[tuple[str, str]]:
    """What Lambda and the services need on the function's behalf, from its configuration."""
    props = res["Properties"]
    grants = set()
    log_group = render(props["LoggingConfig"]["LogGroup"])
    grants |= {("logs:CreateLogStream", log_group), ("logs:PutLogEvents", log_group)}
    for event in (props.get("Events") or {}).values():
        if event["Type"] == "SQS":  # the event source mapping polls with the function's role
            queue = render(event["Properties"]["Queue"])
            for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes", "ChangeMessageVisibility"):
                grants.add((f"sqs:{a}", queue))
        elif event["Type"] == "DynamoDB":  # the stream's event source mapping reads with it
            stream = render(event["Properties"]["Stream"])
            table = re.fullmatch(r"<(\w+)\.StreamArn>", stream)
            assert table, f"{fn}: a DynamoDB event on {stream}, not a table's StreamArn"
            for a in ("DescribeStream", "GetRecords", "GetShardIterator"):
                grants.add((f"dynamodb:{a}", stream))
            # ListStreams names no single stream: the table's streams, as AWS's example policy
            # for Lambda and DynamoDB Streams grants it.
            grants.add(("dynamodb:ListStreams", f"<{table.group(1)}>/stream/*"))
            # Batches given up go to the mapping's on-failure destination, sent with the role.
            of = ((event["Properties"].get("DestinationConfig") or {}).get("OnFailure") or {})
            if of:
                grants.add(("sqs:SendMessage", render(of["Destination"])))
        else:
            raise AssertionError(f"{fn}: an event of type {event['Type']} the test does not know the grants of")
    if "DeadLetterQueue" in props:  # Lambda sends failed async events with the function's role
        grants.add(("sqs:SendMessage", render(props["DeadLetterQueue"]["TargetArn"])))
    on_failure = ((props.get("EventInvokeConfig") or {}).get("DestinationConfig") or {}).get("OnFailure")
    if on_failure:
        assert on_failure["Type"] == "SQS", f"{fn}: on-failure destination is not SQS"
        grants.add(("sqs:SendMessage", render(on_failure["Destination"])))
    grants |= {(a, "<TidemarkKey>") for a in KMS_ACTIONS}
    return grants


# Roles that are not a function's: their exact grants, with the reason for each.
OTHER_ROLES = {
    "ReconcileScheduleRole": {
        ("lambda:InvokeFunction", "<ReconcileFunction>"),  # the schedule's target
        ("sqs:SendMessage", "<ControlDeadLetterQueue>"),  # firings it could not deliver
        ("kms:GenerateDataKey", "<TidemarkKey>"),  # ... to the KMS-encrypted DLQ
        ("kms:Decrypt", "<TidemarkKey>"),
    },
    "PublishSweepScheduleRole": {
        ("lambda:InvokeFunction", "<PublishFunction>"),  # the sweep's target
        ("sqs:SendMessage", "<ControlDeadLetterQueue>"),  # firings it could not deliver
        ("kms:GenerateDataKey", "<TidemarkKey>"),  # ... to the KMS-encrypted DLQ
        ("kms:Decrypt", "<TidemarkKey>"),
    },
    "MaintainScheduleRole": {
        ("lambda:InvokeFunction", "<MaintainFunction>"),  # the daily run's target
        ("sqs:SendMessage", "<ControlDeadLetterQueue>"),  # firings it could not deliver
        ("kms:GenerateDataKey", "<TidemarkKey>"),  # ... to the KMS-encrypted DLQ
        ("kms:Decrypt", "<TidemarkKey>"),
    },
}

# Allow statements whose Resource is "*" (or whose Action has a wildcard): only where AWS
# accepts nothing narrower.
WILDCARD_EXCEPTIONS = {
    ("TidemarkKey", "AccountIamPolicies"): "a key policy's Resource is always '*' (this key); "
    "kms:* to the account root is AWS's default statement that lets IAM policies grant the key",
    ("TidemarkKey", "CloudWatchLogsForThisStack"): "key policy: '*' means this key",
    ("TidemarkKey", "EventBridgeToEncryptedQueues"): "key policy: '*' means this key",
    ("TidemarkKey", "CloudWatchAlarmsToEncryptedTopic"): "key policy: '*' means this key",
}

# ---------------------------------------------------------------------------------------------
# Environment: what each function's code reads, and what the template must set.
# ---------------------------------------------------------------------------------------------
ENV = {
    "IngestFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "TIDEMARK_CONCURRENCY", "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT",
                       "GLIBC_TUNABLES"},
    "ReconcileFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "TIDEMARK_RECONCILE_QUEUE_URL", "RUST_LOG",
                          "AWS_LAMBDA_LOG_FORMAT"},
    "BackfillFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "TIDEMARK_BACKFILL_QUEUE_URL", "RUST_LOG",
                         "AWS_LAMBDA_LOG_FORMAT"},
    "PublishFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT"},
    "MaintainFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "TIDEMARK_MAINTENANCE", "TIDEMARK_GLUE_DATABASE",
                         "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT"},
}
# Read by libraries rather than by `env::var` in our code.
LIBRARY_ENV = {
    "RUST_LOG": "tracing-subscriber's EnvFilter::try_from_default_env (shared/src/telemetry.rs)",
    "AWS_LAMBDA_LOG_FORMAT": "lambda_runtime's tracing set-up",
    "GLIBC_TUNABLES": "glibc's dynamic loader, at the process's start: the malloc settings the ingest function's "
                      "memory was measured with (docs/pages/deploy.md, \"Memory\"; tests/tests/memory.rs)",
}
# Read by the code and deliberately not set by the template.
UNSET_ENV = {
    "TIDEMARK_CONFIG_FILE": "the document is passed inline (TIDEMARK_CONFIG); no file ships in the zip",
    "TIDEMARK_BACKFILL_CHAIN": "unset = each planner call invokes the next (the wanted default); 'off' is for tests",
    "AWS_LAMBDA_FUNCTION_NAME": "set by Lambda itself (backfill's own name, for the next planner call)",
    "AWS_ENDPOINT_URL": "S3 emulators only (path-style addressing; publish passes it to delta-rs's S3 store)",
    "AWS_ENDPOINT_URL_S3": "S3 emulators only (path-style addressing; publish passes it to delta-rs's S3 store)",
    "TIDEMARK_MAINTENANCE": "\"1\" on the maintenance function only; unset, the publish function refuses "
    "{\"maintain\"} (ENV says which function sets it)",
    "TIDEMARK_GLUE_DATABASE": "the catalog step's database, on the maintenance function only (the publish "
    "function refuses the catalog step)",
    "TIDEMARK_STALL_SECONDS": "the conversion watchdog's stall limit (shared/src/watchdog.rs): unset = 60 s, "
    "at most a third of the invocation's time left; set it only for a decoder known to be slow",
}


# =============================================================================================
# Loading and rendering the template
# =============================================================================================
@lru_cache(maxsize=None)
def template() -> dict:
    return cfn_yaml.load(str(TEMPLATE))


def resources(type_: str | None = None) -> dict:
    res = template()["Resources"]
    return {k: v for k, v in res.items() if type_ is None or v["Type"] == type_}


PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "REGION",
    "AWS::AccountId": "ACCOUNT",
    "AWS::StackName": "STACK",
    "AWS::URLSuffix": "amazonaws.com",
}
# Both ways of naming a bucket (created, or existing by parameter) render the same.
ALIASES = {
    "LandingBucket": "<landing>",
    "LandingBucketName": "<landing>",
    "LakeBucket": "<lake>",
    "LakeBucketName": "<lake>",
}


def _ref(name: str) -> str:
    if name in PSEUDO:
        return PSEUDO[name]
    if name in ALIASES:
        return ALIASES[name]
    if "." in name:  # ${X.Arn} inside Fn::Sub
        base, attr = name.split(".", 1)
        return f"<{base}>" if attr == "Arn" else f"<{base}.{attr}>"
    return f"<{name}>"


def render(expr) -> str:
    """A CloudFormation value as a comparable string: `!Ref X` and `!GetAtt X.Arn` become
    `<X>`, both names of a bucket become `<landing>` / `<lake>`, pseudo parameters become
    placeholders (aws, REGION, ACCOUNT, STACK)."""
    if isinstance(expr, str):
        return str(expr)
    if isinstance(expr, (int, float, bool)):
        return str(expr)
    if isinstance(expr, dict) and len(expr) == 1:
        (fn, arg), = expr.items()
        if fn == "Ref":
            return _ref(arg)
        if fn == "Fn::GetAtt":
            parts = arg.split(".", 1) if isinstance(arg, str) else list(arg)
            return _ref(f"{parts[0]}.{render(parts[1])}")
        if fn == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

            def sub(m: re.Match) -> str:
                name = m.group(1)
                if name.startswith("!"):
                    return "${" + name[1:] + "}"
                return render(variables[name]) if name in variables else _ref(name)

            return re.sub(r"\$\{([^}]+)\}", sub, text)
        if fn == "Fn::If":
            cond, a, b = arg
            ra, rb = render(a), render(b)
            return ra if ra == rb else f"<if {cond}: {ra} | {rb}>"
        if fn == "Fn::Join":
            sep, items = arg
            return render(sep).join(render(i) for i in items)
        if fn == "Fn::Split":
            return "<split>"
        if fn == "Fn::FindInMap":
            return f"<map {'/'.join(render(a) for a in arg)}>"
    raise AssertionError(f"cannot render {expr!r}")


def as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, list) else [x]


# Set on a statement that applies only under a template condition (`!If [Cond, st, ...]`).
CONDITION = "__condition__"


def statements(doc) -> list[dict]:
    """The policy's statements; one written `!If [Cond, A, B]` stands for both branches, each
    tagged with its condition (CONDITION: "Cond" / "!Cond"), `!Ref AWS::NoValue` for none."""
    out = []
    for st in as_list(doc.get("Statement")):
        if isinstance(st, dict) and list(st) == ["Fn::If"]:
            cond, a, b = st["Fn::If"]
            for branch, tag in ((a, cond), (b, f"!{cond}")):
                if branch == {"Ref": "AWS::NoValue"}:
                    continue
                assert isinstance(branch, dict) and "Effect" in branch, f"cannot read statement {branch!r}"
                out.append({**branch, CONDITION: tag})
        else:
            out.append(st)
    return out


def globals_env() -> dict:
    return dict(((template().get("Globals") or {}).get("Function") or {}).get("Environment", {}).get("Variables") or {})


def function_env(fn: str) -> dict:
    env = globals_env()
    own = (resources()[fn]["Properties"].get("Environment") or {}).get("Variables") or {}
    env.update(own)  # SAM merges Globals maps, the function's own entries winning
    return env


def failures_message(title: str, failures: list[str]) -> str:
    return f"INVARIANT: {title}\n  - " + "\n  - ".join(failures)


def check(title: str, failures: list[str]) -> None:
    """Fail with the invariant's title and one line per offence (no traceback: the message
    says it all)."""
    if failures:
        pytest.fail(failures_message(title, failures), pytrace=False)


# =============================================================================================
# Reading the Rust code
# =============================================================================================
def rust_text(*paths: str) -> str:
    """The Rust files under `paths`, without comments and test modules, method chains joined
    onto one line."""
    out = []
    for p in paths:
        path = ROOT / p
        files = sorted(path.rglob("*.rs")) if path.is_dir() else [path]
        for f in files:
            assert f.exists(), f"{f} does not exist: update FUNCTION_CODE / COMMON_CODE"
            text = f.read_text()
            # Unit tests are not the function's code: drop the #[cfg(test)] module (the
            # convention here is one, at the end of the file).
            text = text.split("#[cfg(test)]", 1)[0]
            text = re.sub(r"(?m)(^|\s)//.*$", r"\1", text)
            text = re.sub(r"\s*\n\s*\.(?=\w)", ".", text)
            out.append(text)
    return "\n".join(out)


def pascal(snake: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in snake.split("_"))


def rust_files(*paths: str) -> list[str]:
    """The .rs files under `paths`, relative to the repository."""
    out = []
    for p in paths:
        path = ROOT / p
        files = sorted(path.rglob("*.rs")) if path.is_dir() else [path]
        out += [f.relative_to(ROOT).as_posix() for f in files]
    return out


def reachable_code(fn: str) -> str:
    """The bodies of the fns a function with modes runs (ENTRY_POINTS): from its roots, every
    call is followed by name to the fns of that name in FUNCTION_CODE[fn], except the cut ones."""
    spec = ENTRY_POINTS[fn]
    nodes: dict[tuple[str, str], list[str]] = {}
    by_name: dict[str, set[tuple[str, str]]] = {}
    for f in rust_files(*FUNCTION_CODE[fn]):
        for name, bodies in fn_bodies(rust_text(f)).items():
            nodes[(f, name)] = bodies
            by_name.setdefault(name, set()).add((f, name))
    for root in spec["roots"]:
        assert root in nodes, f"ENTRY_POINTS[{fn!r}]: no fn {root[1]} in {root[0]}: update the test"
    for (f, name), callees in spec["cut"].items():
        assert (f, name) in nodes, f"ENTRY_POINTS[{fn!r}] cuts calls of fn {name} in {f}, which has none: update the test"
        for callee in callees:
            assert any(re.search(rf"\b{callee}\s*\(", b) for b in nodes[(f, name)]), \
                f"ENTRY_POINTS[{fn!r}]: fn {name} in {f} no longer calls {callee}: update the test"
    seen: set[tuple[str, str]] = set()
    todo = list(spec["roots"])
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        cut = spec["cut"].get(node, set())
        for body in nodes[node]:
            for callee in re.findall(r"\b([a-z_][a-z0-9_]*)\s*(?:::<[^>]*>)?\(", body):
                if callee not in cut:
                    todo.extend(by_name.get(callee, ()))
    return "\n".join(b for node in sorted(seen) for b in nodes[node])


# The Glue operations (tidemark_delta::catalog, its client `self.client`): every other `client.x()`
# of a function's own code is its Lambda client's.
GLUE_OPERATIONS = {"get_table", "create_table", "update_table", "get_database", "create_database"}


def code_calls(fn: str) -> set[tuple[str, str]]:
    """(service, operation) the function's code path makes, read from the source."""
    text = reachable_code(fn) if fn in ENTRY_POINTS else rust_text(*FUNCTION_CODE[fn])
    calls = set()
    unknown = []
    for port, method in re.findall(r"\b(store|ledger|queue)\.(\w+)\(", text):
        service, table, _ = PORTS[port]
        if method in WRAPPER_METHODS:
            continue
        if method not in table:
            unknown.append(f"{port}.{method}(")
            continue
        calls |= {(service, op) for op in table[method]}
    own = reachable_code(fn) if fn in ENTRY_POINTS else rust_text(FUNCTION_CODE[fn][0])
    for op in re.findall(r"\bclient\.(\w+)\(\)", own):
        calls.add(("glue" if op in GLUE_OPERATIONS else "lambda", pascal(op)))
    assert not unknown, f"{fn}: calls the test does not know: {unknown} (add them to STORE_METHODS / LEDGER_METHODS / QUEUE_METHODS)"
    return calls


def fn_bodies(text: str) -> dict[str, list[str]]:
    """name -> the bodies of the `fn name` items of a Rust file (each from its signature to
    the next `fn`)."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"\bfn (\w+)\s*[<(]", text)]
    bodies: dict[str, list[str]] = {}
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        bodies.setdefault(name, []).append(text[pos:end].split("{", 1)[-1])
    return bodies


def after_call(body: str, open_paren: int) -> str:
    """The text after the call whose argument list opens at `open_paren`."""
    depth = 0
    for i in range(open_paren, len(body)):
        depth += {"(": 1, ")": -1}.get(body[i], 0)
        if depth == 0:
            return body[i + 1:]
    return ""


def adapter_operations(path: str) -> dict[str, set[str]]:
    """fn name -> the SDK operations it sends, directly (`.client.x()`) or through the file's
    other fns (`self.f(`, `Self::f(`, `f(`). A helper whose request is only built, its input
    taken with `.as_input()` (finish_message takes its counter update into a transaction
    that way), sends nothing for the caller."""
    bodies = fn_bodies(rust_text(path))
    direct: dict[str, set[str]] = {}
    helpers: dict[str, set[str]] = {}
    for name, texts in bodies.items():
        direct[name], helpers[name] = set(), set()
        for body in texts:
            direct[name] |= {pascal(op) for op in re.findall(r"\.client\.(\w+)\(\)", body)}
            for m in re.finditer(r"(?:\bself\.|\bSelf::|(?<![.\w:]))(\w+)\(", body):
                callee = m.group(1)
                if callee in bodies and callee != name and not after_call(body, m.end() - 1).startswith(".as_input()"):
                    helpers[name].add(callee)

    def sent(name: str, seen: frozenset = frozenset()) -> set[str]:
        ops = set(direct[name])
        for h in helpers[name] - seen:
            ops |= sent(h, seen | {name})
        return ops

    return {name: sent(name) for name in bodies}


# =============================================================================================
# Expected grants
# =============================================================================================
def resource_arn(kind: str, fn: str) -> str:
    if kind in ("landing", "lake"):
        return f"arn:aws:s3:::<{kind}>/*"
    if kind == "delta_log":
        return "arn:aws:s3:::<lake>/*_delta_log/*"
    if kind == "compacted":
        return f"arn:aws:s3:::<lake>/*{compacted_file_prefix()}*.parquet"
    if kind == "selection":
        return "arn:aws:s3:::<lake>/*.m????????????????.????????.parquet"
    if kind == "lake_parquet":
        return "arn:aws:s3:::<lake>/*.parquet"
    if kind == "table":
        return "<LedgerTable>"
    if kind == "index":
        return "<LedgerTable>/index/by_source"
    if kind == "inventory":
        return "arn:aws:s3:::<InventoryBucketName>/*"
    if kind in QUEUE_KINDS:
        var = QUEUE_KINDS[kind][1]
        url = function_env(fn).get(var)
        assert url is not None, f"{fn} sends to its {kind} but its environment has no {var}"
        return render(url)
    if kind == "self":
        name = render(resources()[fn]["Properties"].get("FunctionName", "<no FunctionName>"))
        return f"arn:aws:lambda:REGION:ACCOUNT:function:{name}"
    raise AssertionError(kind)


GLUE_TABLE_ARNS = (
    "arn:aws:glue:REGION:ACCOUNT:catalog",
    "arn:aws:glue:REGION:ACCOUNT:database/<GlueDatabase>",
    "arn:aws:glue:REGION:ACCOUNT:table/<GlueDatabase>/*",
)


def compacted_file_prefix() -> str:
    """tidemark::compact::FILE_PREFIX: where a compacted file's name starts."""
    m = re.search(r'pub const FILE_PREFIX: &str = "([^"*/]+)";', rust_text("shared/src/compact.rs"))
    assert m, "shared/src/compact.rs no longer declares FILE_PREFIX: update the test"
    return m.group(1)


def bucket_of(object_arn: str) -> str:
    """The bucket ARN of an object ARN (`arn:aws:s3:::<lake>/...` -> `arn:aws:s3:::<lake>`)."""
    return object_arn.split("/", 1)[0]


def expected_grants(fn: str) -> set[tuple[str, str]]:
    grants = set()
    for svc, op, kind in SDK_CALLS[fn] | set(LIBRARY_CALLS.get(fn, {})):
        if kind == "glue_table":
            # Glue authorizes a table call on the catalog, the database and the table.
            grants |= {(a, r) for a in IAM_ACTION[(svc, op)] for r in GLUE_TABLE_ARNS}
            continue
        arn = resource_arn(kind, fn)
        needs = {(a, bucket_of(arn) if a == "s3:ListBucket" else arn) for a in IAM_ACTION[(svc, op)]}
        if svc == "s3" and op in ANSWERS_404:
            needs.add(("s3:ListBucket", bucket_of(arn)))
        cond = CONDITIONAL_KINDS.get(kind)
        grants |= {(a, f"{r} (if {cond})" if cond else r) for a, r in needs}
    return grants | platform_grants(fn, resources()[fn])


def role_grants(role: dict) -> tuple[set[tuple[str, str]], list[str]]:
    grants, problems = set(), []
    props = role["Properties"]
    for key in ("ManagedPolicyArns", "PermissionsBoundary"):
        if key in props:
            problems.append(f"has {key}: every grant must be written out in the template")
    for policy in props.get("Policies", []):
        for st in statements(policy["PolicyDocument"]):
            if st.get("Effect") != "Allow":
                continue
            if "NotAction" in st or "NotResource" in st:
                problems.append(f"statement {st.get('Sid')}: NotAction / NotResource")
            cond = st.get(CONDITION)
            for action in as_list(st.get("Action")):
                for r in as_list(st.get("Resource")):
                    grants.add((action, render(r) + (f" (if {cond})" if cond else "")))
    return grants, problems


def role_of(fn: str) -> str:
    role = resources()[fn]["Properties"].get("Role")
    assert role is not None, f"{fn} has no Role: SAM would generate one with managed policies (Resource *)"
    assert isinstance(role, dict) and "Fn::GetAtt" in role, f"{fn}: Role must be !GetAtt <role>.Arn"
    target = role["Fn::GetAtt"]
    return target.split(".")[0] if isinstance(target, str) else target[0]


def fmt(grants) -> str:
    return ", ".join(f"{a} on {r}" for a, r in sorted(grants)) or "(none)"


# =============================================================================================
# The invariants
# =============================================================================================
def test_template_parses_and_declares_the_five_functions():
    funcs = resources("AWS::Serverless::Function")
    check("the template declares exactly the ingest, reconcile, backfill, publish and maintenance functions",
          [f"functions: {sorted(funcs)}"] if set(funcs) != set(FUNCTIONS) else [])
    failures = []
    ingest = funcs["IngestFunction"]
    for fn in FUNCTIONS:
        f = funcs[fn]
        for key in ("Runtime", "Architectures", "Handler"):
            if f["Properties"].get(key) != ingest["Properties"].get(key):
                failures.append(f"{fn}.{key} differs from ingest's")
        if f.get("Metadata", {}).get("BuildMethod") != "rust-cargolambda":
            failures.append(f"{fn}: Metadata.BuildMethod is not rust-cargolambda")
        if f["Properties"].get("KmsKeyArn") is None:
            failures.append(f"{fn}: no KmsKeyArn (environment encrypted with the stack's key)")
        if f["Properties"].get("LoggingConfig", {}).get("LogFormat") != "JSON":
            failures.append(f"{fn}: LoggingConfig.LogFormat is not JSON")
    check("all functions share runtime, architecture, build method, key and JSON logs", failures)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_the_call_table_matches_the_code(fn):
    """SDK_CALLS[fn] is what the code calls: re-derived from the source, by operation."""
    derived = code_calls(fn)
    table = {(svc, op) for svc, op, _ in SDK_CALLS[fn]}
    failures = [f"the code calls {svc}:{op}, which SDK_CALLS[{fn!r}] (and so the role) lacks"
                for svc, op in sorted(derived - table)]
    failures += [f"SDK_CALLS[{fn!r}] lists {svc}:{op}, which the code no longer calls"
                 for svc, op in sorted(table - derived)]
    check(f"{fn}: the table of SDK calls agrees with the code", failures)


def test_the_adapters_make_only_known_sdk_calls():
    failures = []
    for port, (service, table, path) in PORTS.items():
        name = {"store": "STORE_METHODS", "ledger": "LEDGER_METHODS", "queue": "QUEUE_METHODS"}[port]
        sent = {pascal(op) for op in re.findall(r"\.client\.(\w+)\(\)", rust_text(path))}
        known = {op for ops in table.values() for op in ops} | (DYNAMODB_CLI_ONLY if port == "ledger" else set())
        failures += [f"{path} calls {op}: add it to {name} and to the roles that reach it"
                     for op in sorted(sent - known)]
        failures += [f"{name} maps to {op}, which {path} never sends" for op in sorted(known - sent)]
        failures += [f"IAM_ACTION has no entry for {service}:{op}" for op in sorted(known - DYNAMODB_CLI_ONLY)
                     if (service, op) not in IAM_ACTION]
        # Method by method: what each port method of the adapter sends.
        per_method = adapter_operations(path)
        for method, ops in table.items():
            if method not in per_method:
                failures.append(f"{name}[{method!r}]: {path} has no fn {method}")
            elif per_method[method] != set(ops):
                failures.append(f"{name}[{method!r}] = {sorted(ops)}, but {path} fn {method} sends "
                                f"{sorted(per_method[method])}")
    # Methods the derivation skips as the Option's, not the port's: no port declares them.
    port_fns = set(re.findall(r"\bfn (\w+)\s*[<(]", rust_text("shared/src/ports.rs")))
    failures += [f"shared/src/ports.rs declares fn {m}: `queue.{m}(` may be a port call, take it out of "
                 f"WRAPPER_METHODS" for m in sorted(set(WRAPPER_METHODS) & port_fns)]
    # The actions of the transactions the DynamoDB adapter builds are what IAM checks.
    kinds = set(re.findall(r"TransactWriteItem::builder\(\)\.(\w+)\(", rust_text("shared/src/aws/dynamodb.rs")))
    unknown = kinds - set(TRANSACT_ITEM_ACTION)
    if unknown:
        failures.append(f"dynamodb.rs builds transaction items {sorted(unknown)}: add them to TRANSACT_ITEM_ACTION")
    actions = {TRANSACT_ITEM_ACTION[k] for k in kinds - unknown}
    if actions != set(IAM_ACTION[("dynamodb", "TransactWriteItems")]):
        failures.append(f"dynamodb.rs's transactions hold {sorted(kinds)} (IAM {sorted(actions)}), but IAM_ACTION "
                        f"grants {sorted(IAM_ACTION[('dynamodb', 'TransactWriteItems')])} for TransactWriteItems")
    # A version-pinned request needs s3:GetObjectVersion / s3:DeleteObjectVersion, which no
    # role grants: the adapter pins with If-Match, never with versionId.
    if re.search(r"\.(set_)?version_id\(\s*[^)\s]", rust_text("shared/src/aws/s3.rs")):
        failures.append("shared/src/aws/s3.rs sends a versionId: the roles need s3:*ObjectVersion")
    check("the AWS adapters send only the operations the test's tables know", failures)


def test_every_file_that_calls_the_ports_is_on_a_function_path():
    """A module of shared/src that calls the ports is on some function's code path (and so in
    its derived calls), or is listed in NOT_ON_A_FUNCTION_PATH with the reason."""
    on_path = {p for paths in FUNCTION_CODE.values() for p in paths} | set(NOT_ON_A_FUNCTION_PATH)
    failures = []
    for f in sorted((ROOT / "shared/src").rglob("*.rs")):
        rel = f.relative_to(ROOT).as_posix()
        if rel.startswith("shared/src/aws/"):
            continue  # the adapters themselves
        if not re.search(r"\b(store|ledger|queue)\.\w+\(", rust_text(rel)):
            continue
        if not any(rel == p or rel.startswith(p + "/") for p in on_path):
            failures.append(f"{rel} calls the ports: add it to a function's FUNCTION_CODE or to NOT_ON_A_FUNCTION_PATH")
    for p in NOT_ON_A_FUNCTION_PATH:
        if not (ROOT / p).exists():
            failures.append(f"NOT_ON_A_FUNCTION_PATH lists {p}, which does not exist")
    # The planner must not reach the per-object path through a Pipeline method either.
    pipeline_methods = set(re.findall(r"pub async fn (\w+)", rust_text("shared/src/process.rs")))
    if not pipeline_methods:
        failures.append("no `pub async fn` found in process.rs: update the test")
    for fn, paths in FUNCTION_CODE.items():
        if "shared/src/process.rs" in paths:
            continue
        text = rust_text(*paths)
        for m in sorted(pipeline_methods):
            if re.search(rf"\b(p|pipeline)\.{m}\(", text):
                failures.append(f"{fn} calls Pipeline::{m}: put COMMON_CODE on its path (and its calls in SDK_CALLS)")
    check("every module that calls the ports is on a function's code path, or says why not", failures)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_function_role_grants_exactly_what_the_code_calls(fn):
    role_name = role_of(fn)
    granted, problems = role_grants(resources()[role_name])
    expected = expected_grants(fn)
    failures = [f"{role_name}: {p}" for p in problems]
    if granted - expected:
        failures.append(f"{role_name} grants what the code does not call: {fmt(granted - expected)}")
    if expected - granted:
        failures.append(f"{role_name} lacks grants the code needs: {fmt(expected - granted)}")
    check(f"{fn}'s role grants exactly the actions its code calls, on those resources", failures)


def test_every_role_is_accounted_for():
    roles = resources("AWS::IAM::Role")
    function_roles = {role_of(fn) for fn in FUNCTIONS}
    failures = [f"{name}: a role the test does not know" for name in roles
                if name not in function_roles and name not in OTHER_ROLES]
    for name, expected in OTHER_ROLES.items():
        if name not in roles:
            failures.append(f"{name} is missing")
            continue
        granted, problems = role_grants(roles[name])
        failures += [f"{name}: {p}" for p in problems]
        if granted != expected:
            failures.append(f"{name}: grants {fmt(granted)}; expected {fmt(expected)}")
    check("every IAM role grants exactly its listed permissions", failures)


def test_sam_generates_no_roles_or_permissions():
    """The SAM translation adds no IAM role (which would carry managed policies with '*')."""
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    class NoManagedPolicies:
        def load(self):
            return {}

    t = yaml_parse(TEMPLATE.read_text())
    for res in t["Resources"].values():
        if res["Type"] == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = "s3://bucket/key.zip"  # what `sam package` puts there
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    out = transform(t, {}, NoManagedPolicies())["Resources"]
    raw = set(resources("AWS::IAM::Role"))
    generated = {k for k, v in out.items() if v["Type"] in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")}
    failures = [f"SAM generates {k}" for k in sorted(generated - raw)]
    for fn in FUNCTIONS:
        env = set(out[fn]["Properties"].get("Environment", {}).get("Variables", {}))
        if env != ENV[fn]:
            failures.append(f"{fn}: after SAM's Globals merge the environment is {sorted(env)}")
    check("SAM's translation adds no IAM role and merges the environment as expected", failures)


def test_backfill_invokes_only_itself():
    props = resources()["BackfillFunction"]["Properties"]
    name = render(props.get("FunctionName", ""))
    granted, _ = role_grants(resources()[role_of("BackfillFunction")])
    invoke = {r for a, r in granted if a == "lambda:InvokeFunction"}
    own = f"arn:aws:lambda:REGION:ACCOUNT:function:{name}"
    check("backfill may invoke itself and nothing else",
          [] if invoke == {own} and name.endswith("-backfill") else [f"InvokeFunction on {sorted(invoke)}, own ARN {own}"])


def all_policy_documents():
    """(resource, document) for every IAM / resource policy in the template."""
    for name, res in resources().items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::IAM::Role":
            for p in props.get("Policies", []):
                yield name, p["PolicyDocument"]
        elif res["Type"] == "AWS::KMS::Key":
            yield name, props["KeyPolicy"]
        elif "PolicyDocument" in props:
            yield name, props["PolicyDocument"]


def test_no_wildcard_resources_except_where_aws_allows_nothing_narrower():
    failures = []
    seen = set()
    for name, doc in all_policy_documents():
        for st in statements(doc):
            if st.get("Effect") != "Allow":
                continue
            wildcard_resource = any(render(r) == "*" for r in as_list(st.get("Resource")))
            wildcard_action = any("*" in a for a in as_list(st.get("Action")))
            if not (wildcard_resource or wildcard_action):
                continue
            key = (name, st.get("Sid"))
            if key in WILDCARD_EXCEPTIONS:
                seen.add(key)
                continue
            what = "Resource '*'" if wildcard_resource else f"Action {as_list(st.get('Action'))}"
            failures.append(f"{name} statement {st.get('Sid')!r}: {what} in an Allow")
    failures += [f"exception {k} no longer needed: remove it from WILDCARD_EXCEPTIONS"
                 for k in sorted(set(WILDCARD_EXCEPTIONS) - seen)]
    check("no Allow with Resource '*' (or a wildcard action) except the listed exceptions", failures)


def tls_denied(policy_props: dict, arn_names: set[str]) -> bool:
    for st in statements(policy_props["PolicyDocument"]):
        cond = st.get("Condition", {}).get("Bool", {})
        if (st.get("Effect") == "Deny" and render(st.get("Principal")) == "*"
                and str(cond.get("aws:SecureTransport")).lower() == "false"
                and arn_names <= {render(r) for r in as_list(st.get("Resource"))}):
            return True
    return False


def test_buckets_are_encrypted_private_and_tls_only():
    failures = []
    policies = resources("AWS::S3::BucketPolicy")
    for name, b in resources("AWS::S3::Bucket").items():
        props = b["Properties"]
        rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
        algos = {r.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules}
        if not algos or not algos <= {"AES256", "aws:kms", "aws:kms:dsse"}:
            failures.append(f"{name}: no default encryption")
        pab = props.get("PublicAccessBlockConfiguration", {})
        for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"):
            if pab.get(k) is not True:
                failures.append(f"{name}: PublicAccessBlockConfiguration.{k} is not true")
        if props.get("OwnershipControls", {}).get("Rules", [{}])[0].get("ObjectOwnership") != "BucketOwnerEnforced":
            failures.append(f"{name}: ACLs not disabled (BucketOwnerEnforced)")
        mine = [p for p in policies.values() if render(p["Properties"]["Bucket"]) == render({"Ref": name})]
        arn = f"<{name}>"
        if not any(tls_denied(p["Properties"], {arn, f"{arn}/*"}) for p in mine):
            failures.append(f"{name}: no bucket policy denying aws:SecureTransport=false on the bucket and its objects")
    check("every bucket is encrypted, fully blocked from public access, and TLS-only", failures)


def dead_letter_targets() -> dict[str, set[str]]:
    """DLQ logical id -> the resources that send their failures to it."""
    out: dict[str, set[str]] = {}

    def add(target, sender: str) -> None:
        out.setdefault(render(target).strip("<>"), set()).add(sender)

    for name, q in resources("AWS::SQS::Queue").items():
        rp = q["Properties"].get("RedrivePolicy")
        if rp:
            add(rp["deadLetterTargetArn"], name)
    for name, f in resources("AWS::Serverless::Function").items():
        p = f["Properties"]
        if "DeadLetterQueue" in p:
            add(p["DeadLetterQueue"]["TargetArn"], name)
        of = ((p.get("EventInvokeConfig") or {}).get("DestinationConfig") or {}).get("OnFailure")
        if of:
            add(of["Destination"], name)
        # A stream's event source mapping: the batches it gives up on.
        for ev in (p.get("Events") or {}).values():
            of = ((ev["Properties"].get("DestinationConfig") or {}).get("OnFailure") or {})
            if of:
                add(of["Destination"], name)
    for name, r in resources("AWS::Events::Rule").items():
        for t in r["Properties"].get("Targets", []):
            if "DeadLetterConfig" in t:
                add(t["DeadLetterConfig"]["Arn"], name)
    for name, s in resources("AWS::Scheduler::Schedule").items():
        dl = s["Properties"]["Target"].get("DeadLetterConfig")
        if dl:
            add(dl["Arn"], name)
    return out


def test_dead_letters_everywhere_and_every_queue_redriven():
    failures = []
    queues = resources("AWS::SQS::Queue")
    dlqs = dead_letter_targets()
    for name, q in queues.items():
        props = q["Properties"]
        if "KmsMasterKeyId" not in props:
            failures.append(f"{name}: not encrypted with the stack's key")
        policies = [p for p in resources("AWS::SQS::QueuePolicy").values()
                    if render({"Ref": name}) in {render(x) for x in p["Properties"]["Queues"]}]
        if not any(tls_denied(p["Properties"], {f"<{name}>"}) for p in policies):
            failures.append(f"{name}: no queue policy denying insecure transport")
        if name in dlqs:
            if props.get("MessageRetentionPeriod", 345600) < 1209600:
                failures.append(f"{name}: a DLQ should keep messages 14 days")
            continue
        rp = props.get("RedrivePolicy")
        if not rp:
            failures.append(f"{name}: a work queue without a RedrivePolicy")
        elif render(rp["deadLetterTargetArn"]).strip("<>") not in queues:
            failures.append(f"{name}: redrives to a queue outside the template")
    senders = set().union(*dlqs.values()) if dlqs else set()
    for fn in FUNCTIONS:
        if fn not in senders:
            failures.append(f"{fn}: failed asynchronous invocations go nowhere (no DLQ / on-failure destination)")
    for kind in ("AWS::Events::Rule", "AWS::Scheduler::Schedule"):
        for name in resources(kind):
            if name not in senders:
                failures.append(f"{name}: undeliverable events go nowhere (no DeadLetterConfig)")
    if not dlqs:
        failures.append("no dead-letter queue at all")
    check("DLQs for every function, rule and schedule; every work queue has a redrive policy", failures)


def lease_margin_s() -> float:
    """The ledger's lease beyond the invocation deadline (process.rs Settings::default)."""
    m = re.search(r"lease_margin_ms:\s*([\d_]+)", rust_text("shared/src/process.rs").split("impl Default for Settings", 1)[-1])
    assert m, "process.rs: no lease_margin_ms in Settings::default; update the test"
    return int(m.group(1).replace("_", "")) / 1000


def test_visibility_timeout_is_six_times_the_consumer_timeout():
    failures = []
    queues = resources("AWS::SQS::Queue")
    margin = lease_margin_s()
    for fn, f in resources("AWS::Serverless::Function").items():
        timeout = f["Properties"].get("Timeout", 3)
        for event in (f["Properties"].get("Events") or {}).values():
            if event["Type"] != "SQS":
                continue
            q = render(event["Properties"]["Queue"]).strip("<>")
            vt = queues[q]["Properties"].get("VisibilityTimeout", 30)
            window = event["Properties"].get("MaximumBatchingWindowInSeconds", 0)
            if vt < 6 * timeout + window:
                failures.append(f"{q}: VisibilityTimeout {vt} < 6 x {fn} Timeout {timeout} + batching window {window}")
            # A message sent back because another worker holds a claim must not return before
            # that claim's lease (deadline + margin) can have run out.
            if vt <= timeout + margin:
                failures.append(f"{q}: VisibilityTimeout {vt} <= {fn} Timeout {timeout} + lease margin {margin:g}")
    check("every queue's visibility timeout is >= 6 x its consumer's timeout (+ batching window) "
          "and above the timeout plus the ledger's lease margin", failures)


def test_work_queue_is_the_one_the_ingest_function_consumes():
    """The planner sends to the queue of its TIDEMARK_BACKFILL_QUEUE_URL; the ingest function
    consumes exactly that queue, with partial batch responses and a concurrency cap of its own;
    no other function consumes it."""
    failures = []
    url = function_env("BackfillFunction").get(WORK_QUEUE_ENV)
    queue = render(url) if url is not None else None
    if queue is None or queue.strip("<>") not in resources("AWS::SQS::Queue"):
        failures.append(f"BackfillFunction's {WORK_QUEUE_ENV} is {queue}, not a queue of the template")
    params = template()["Parameters"]
    consumers = {}
    for fn, f in resources("AWS::Serverless::Function").items():
        for name, ev in (f["Properties"].get("Events") or {}).items():
            if ev["Type"] != "SQS":
                continue
            p = ev["Properties"]
            consumers.setdefault(render(p["Queue"]), []).append(fn)
            # ingest::handle answers with batchItemFailures; without this Lambda ignores them
            # and deletes the failed messages with the rest of the batch.
            if p.get("FunctionResponseTypes") != ["ReportBatchItemFailures"]:
                failures.append(f"{fn}.{name}: FunctionResponseTypes is not [ReportBatchItemFailures]")
            cap = (p.get("ScalingConfig") or {}).get("MaximumConcurrency")
            if not (isinstance(cap, dict) and cap.get("Ref") in params):
                failures.append(f"{fn}.{name}: ScalingConfig.MaximumConcurrency is not a parameter")
            elif (params[cap["Ref"]].get("MinValue", 0) < 2 or params[cap["Ref"]].get("MaxValue", 10**9) > 1000):
                failures.append(f"{fn}.{name}: {cap['Ref']} allows values outside 2-1000 (the event source's limits)")
    if queue is not None and consumers.get(queue) != ["IngestFunction"]:
        failures.append(f"{queue} is consumed by {consumers.get(queue)}, not by the ingest function alone")
    caps = [ev["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency", {}).get("Ref")
            for ev in (resources()["IngestFunction"]["Properties"].get("Events") or {}).values() if ev["Type"] == "SQS"]
    if len(set(caps)) != len(caps):
        failures.append(f"the ingest function's event sources share a concurrency cap: {caps}")
    check("backfill work items go to a queue the ingest function alone consumes, with partial batch "
          "responses and its own concurrency cap", failures)


def test_reconcile_queue_is_the_one_the_reconcile_function_consumes():
    """The reconcile function sends the parts of a split window to the queue of its
    TIDEMARK_RECONCILE_QUEUE_URL and takes them back from that queue itself (functions/reconcile
    answers an SQS batch with batchItemFailures): one part an invocation, partial batch
    responses, a concurrency cap of its own; no other function consumes it or is told its URL."""
    failures = []
    consts = dict(re.findall(r'pub const (\w+): &str = "([^"]+)";', rust_text("shared/src/aws/mod.rs")))
    for kind, (const, var) in QUEUE_KINDS.items():
        if consts.get(const) != var:
            failures.append(f"shared/src/aws/mod.rs {const} is {consts.get(const)!r}, the test's {kind} reads {var}")
    url = function_env("ReconcileFunction").get(RECONCILE_QUEUE_ENV)
    queue = render(url) if url is not None else None
    if queue is None or queue.strip("<>") not in resources("AWS::SQS::Queue"):
        failures.append(f"ReconcileFunction's {RECONCILE_QUEUE_ENV} is {queue}, not a queue of the template")
    consumers, caps = {}, {}
    for fn, f in resources("AWS::Serverless::Function").items():
        if fn != "ReconcileFunction" and RECONCILE_QUEUE_ENV in function_env(fn):
            failures.append(f"{fn} is given {RECONCILE_QUEUE_ENV}: only the reconcile function splits windows")
        for name, ev in (f["Properties"].get("Events") or {}).items():
            if ev["Type"] != "SQS":
                continue
            consumers.setdefault(render(ev["Properties"]["Queue"]), []).append((fn, name))
            cap = ((ev["Properties"].get("ScalingConfig") or {}).get("MaximumConcurrency") or {})
            caps.setdefault(cap.get("Ref") if isinstance(cap, dict) else None, []).append(f"{fn}.{name}")
    mine = consumers.get(queue, [])
    if [fn for fn, _ in mine] != ["ReconcileFunction"]:
        failures.append(f"{queue} is consumed by {[f'{fn}.{n}' for fn, n in mine]}, not by the reconcile function alone")
    else:
        fn, name = mine[0]
        p = resources()[fn]["Properties"]["Events"][name]["Properties"]
        # A part is one invocation's share (reconcile.part_objects): a batch of parts would
        # share one deadline, and the later parts would run out of time.
        if p.get("BatchSize") != 1:
            failures.append(f"{fn}.{name}: BatchSize {p.get('BatchSize')}, not 1 (one part an invocation)")
        if p.get("FunctionResponseTypes") != ["ReportBatchItemFailures"]:
            failures.append(f"{fn}.{name}: FunctionResponseTypes is not [ReportBatchItemFailures]")
        cap = ((p.get("ScalingConfig") or {}).get("MaximumConcurrency") or {})
        ref = cap.get("Ref") if isinstance(cap, dict) else None
        if ref is None or ref not in template()["Parameters"]:
            failures.append(f"{fn}.{name}: ScalingConfig.MaximumConcurrency is not a parameter")
        elif caps.get(ref) != [f"{fn}.{name}"]:
            failures.append(f"{ref} caps {caps.get(ref)}: the reconcile queue's source needs a cap of its own")
    check("the parts of split windows go to a queue the reconcile function alone consumes, one part an "
          "invocation, with partial batch responses and its own concurrency cap", failures)


def stream_events() -> list[tuple[str, str, dict]]:
    """(function, event name, properties) of every DynamoDB stream event source."""
    return [(fn, name, ev["Properties"]) for fn, f in resources("AWS::Serverless::Function").items()
            for name, ev in (f["Properties"].get("Events") or {}).items() if ev["Type"] == "DynamoDB"]


def test_publish_follows_the_ledger_stream():
    """The ledger table's stream (KEYS_ONLY: the handler reads each changed key's record
    itself) feeds the publish function alone: from the start of the retained stream, one
    committer per shard, partial batch responses (tidemark_delta::stream answers with
    DynamoDbEventResponse), bounded retries and record age, and an on-failure destination that
    is a DLQ of the template."""
    failures = []
    table = resources()["LedgerTable"]["Properties"]
    view = (table.get("StreamSpecification") or {}).get("StreamViewType")
    if view != "KEYS_ONLY":
        failures.append(f"LedgerTable StreamViewType {view}, not KEYS_ONLY (the handler reads only the keys)")
    stream_rs = rust_text(f"{DELTA_SRC}/stream.rs")
    if "change.keys" not in stream_rs or re.search(r"\b(new_image|old_image)\b", stream_rs):
        failures.append(f"{DELTA_SRC}/stream.rs reads more than a record's keys: KEYS_ONLY would not do")
    if "DynamoDbEventResponse" not in stream_rs or "batch_item_failures" not in stream_rs:
        failures.append(f"{DELTA_SRC}/stream.rs no longer answers with batch item failures")
    if not re.search(r"ledger\.get_many_latest\(", rust_text(f"{DELTA_SRC}/lib.rs")):
        failures.append("the publisher no longer reads the changed keys strongly consistent (get_many_latest)")
    events = stream_events()
    if [(fn, p.get("Stream") and render(p["Stream"])) for fn, _, p in events] != [
            ("PublishFunction", "<LedgerTable.StreamArn>")]:
        failures.append(f"stream event sources {[(fn, n) for fn, n, _ in events]}: expected the publish "
                        "function's alone, on the ledger table's stream")
    dlqs = dead_letter_targets()
    for fn, name, p in events:
        where = f"{fn}.{name}"
        want = {"StartingPosition": "TRIM_HORIZON", "ParallelizationFactor": 1,
                "FunctionResponseTypes": ["ReportBatchItemFailures"]}
        failures += [f"{where}: {k} = {p.get(k)!r}, expected {v!r}" for k, v in want.items() if p.get(k) != v]
        if not (isinstance(p.get("BatchSize"), int) and 1 <= p["BatchSize"] <= 10000):
            failures.append(f"{where}: BatchSize {p.get('BatchSize')!r}")
        retries = p.get("MaximumRetryAttempts")
        if not (isinstance(retries, int) and 0 <= retries <= 10000):
            failures.append(f"{where}: MaximumRetryAttempts {retries!r}: unbounded (-1, the default) holds the shard")
        age = p.get("MaximumRecordAgeInSeconds")
        if not (isinstance(age, int) and 60 <= age < 86400):
            failures.append(f"{where}: MaximumRecordAgeInSeconds {age!r}: must be under the stream's 24 hours")
        of = ((p.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
        q = render(of).strip("<>") if of else None
        if q not in resources("AWS::SQS::Queue") or q not in dlqs:
            failures.append(f"{where}: on-failure destination {of}, not a dead-letter queue of the template")
    check("the ledger table's KEYS_ONLY stream feeds the publish function alone, one committer per shard, "
          "with partial batch responses, bounded retries and a DLQ", failures)


def test_library_calls_still_describe_the_code():
    """LIBRARY_CALLS holds while delta-rs is used as tidemark-delta uses it: the S3 store
    only, deltalake-aws 1.x (its log store commits with a conditional PUT; no temporary file
    renamed, so no copy and no delete), no locking provider or unsafe rename, every commit made
    without checkpoint or log cleanup (quiet() in delta.rs), and per function exactly the
    maintenance operations of DELTA_MAINTENANCE_RUN, read from the fns its mode reaches: none
    for the publish function; checkpoint, log cleanup and a VACUUM dry run (its deletes go
    through our adapter, which keeps the files the ledger names) for the maintenance function.
    Each function's LIBRARY_CALLS are the commit's calls plus what its operations need."""
    failures = []
    cargo = (ROOT / DELTA_CRATE / "Cargo.toml").read_text()
    dep = re.search(r"(?m)^deltalake = \{(.*)\}$", cargo)
    if not dep or "default-features = false" not in dep.group(1) or not re.search(r'features = \["s3"\]', dep.group(1)):
        failures.append(f"{DELTA_CRATE}/Cargo.toml: deltalake is not default-features = false, features = [\"s3\"]")
    lock = (ROOT / "Cargo.lock").read_text()
    aws = re.search(r'name = "deltalake-aws"\nversion = "(\d+)\.', lock)
    if not aws or aws.group(1) != "1":
        failures.append(f"Cargo.lock: deltalake-aws {aws and aws.group(1)}.x, not 1.x: check how it commits on S3 "
                        "(and what it needs) again, then update LIBRARY_CALLS")
    text = rust_text(DELTA_SRC, "functions/publish/src")
    for what in ("locking_provider", "LOCKING_PROVIDER", "unsafe_rename", "UNSAFE_RENAME"):
        if what in text:
            failures.append(f"{DELTA_SRC} or functions/publish/src mentions {what}: the log store would not be the conditional-PUT one")
    delta = rust_text(f"{DELTA_SRC}/delta.rs")
    for setting in ("with_create_checkpoint(false)", "with_cleanup_expired_logs(Some(false))"):
        if setting not in delta:
            failures.append(f"delta.rs no longer commits with {setting}")
    props = len(re.findall(r"CommitProperties::default\(\)", text))
    quiet = len(re.findall(r"quiet\(CommitProperties::default\(\)\)", text))
    if props != quiet:
        failures.append(f"{props - quiet} commit(s) in {DELTA_SRC} not made through quiet()")
    # What a commit needs (open, load, update_state, commit), whichever function makes it.
    commit_calls = set(LIBRARY_CALLS["PublishFunction"])
    ops = "|".join(DELTA_MAINTENANCE_OPS)
    for fn, runs in DELTA_MAINTENANCE_RUN.items():
        code = reachable_code(fn)
        called = set(re.findall(rf"\b({ops})\s*\(", code))
        for op in sorted(called - runs):
            failures.append(f"{fn} runs delta-rs {op}(: "
                            + ("not allowed in this function" if DELTA_MAINTENANCE_OPS[op] else "run by no function")
                            + " (DELTA_MAINTENANCE_RUN; its S3 calls would be missing from LIBRARY_CALLS)")
        for op in sorted(runs - called):
            failures.append(f"{fn} no longer runs delta-rs {op}(: update DELTA_MAINTENANCE_RUN and LIBRARY_CALLS")
        want = commit_calls.union(*(DELTA_MAINTENANCE_OPS[op] for op in runs))
        declared = set(LIBRARY_CALLS.get(fn, {}))
        if declared != want:
            failures.append(f"LIBRARY_CALLS[{fn!r}] declares {sorted(declared - want)} beyond and lacks "
                            f"{sorted(want - declared)} of what its commits and {sorted(runs) or 'no maintenance'} need")
        dry = re.findall(r"\bwith_dry_run\(([^)]*)\)", code)
        if "vacuum" in called and dry != ["true"]:
            failures.append(f"{fn}: VACUUM is not a dry run (with_dry_run {dry}): delta-rs would delete data files "
                            "itself, ledger-named ones too")
    failures += [f"LIBRARY_CALLS names {fn}, which DELTA_MAINTENANCE_RUN does not" for fn in LIBRARY_CALLS
                 if fn not in DELTA_MAINTENANCE_RUN]
    check("delta-rs makes only the S3 calls LIBRARY_CALLS declares, and maintains tables in the maintenance "
          "function only", failures)


def test_table_files_written_and_deleted_are_the_ones_granted():
    """The committer (tidemark-delta, which the publish crate runs) writes lake objects through
    our S3 adapter only in put_table_file, PUT with If-None-Match, called by write_compacted (a
    new name that starts with tidemark::compact::FILE_PREFIX: the `compacted` kind,
    `*compacted-*.parquet`) and by merge.rs write_selection (`<output name>.m<16 hex>.<8
    hex>.parquet`: the `selection` kind), and deletes them only in maintain.rs maintain, the
    files VACUUM's dry run lists (the `lake_parquet` kind)."""
    failures = []
    calls: dict[str, list[tuple[str, str, str]]] = {}
    bodies_by_name: dict[str, str] = {}
    for f in rust_files(DELTA_SRC, "functions/publish/src"):
        for name, bodies in fn_bodies(rust_text(f)).items():
            for body in bodies:
                bodies_by_name[name] = bodies_by_name.get(name, "") + body
                for method in re.findall(r"\bstore\.(\w+)\(", body):
                    if STORE_METHODS.get(method, ("GetObject",))[0] not in ("GetObject", "HeadObject", "ListObjectsV2"):
                        calls.setdefault(method, []).append((f, name, body))
    writers = {m: [(f, n) for f, n, _ in v] for m, v in calls.items()}
    want = {"put": [(f"{DELTA_SRC}/lib.rs", "put_table_file")],
            "delete": [(f"{DELTA_SRC}/maintain.rs", "maintain")]}
    if writers != want:
        failures.append(f"the committer writes and deletes through the S3 adapter in {writers}, not {want}: "
                        "update SDK_CALLS' resource kinds and the roles")
    else:
        if "WriteCondition::Absent" not in calls["put"][0][2]:
            failures.append("put_table_file no longer writes with WriteCondition::Absent (If-None-Match)")
        callers = sorted(n for n, b in bodies_by_name.items() if re.search(r"\.put_table_file\(", b))
        if callers != ["write_compacted", "write_selection"]:
            failures.append(f"put_table_file is called by {callers}, not write_compacted and write_selection: "
                            "update the resource kinds")
        compacted = bodies_by_name.get("write_compacted", "")
        for needed in ("tidemark::compact::FILE_PREFIX", '.parquet"'):
            if needed not in compacted:
                failures.append(f"write_compacted no longer names its file with {needed}")
        naming = bodies_by_name.get("selection_name", "")
        if '"{stem}.m{hash}.{nonce}.parquet"' not in naming or "[..8]" not in naming:
            failures.append("merge.rs selection_name no longer makes <stem>.m<hash>.<8-char nonce>.parquet")
        if 'format!("{h:016x}")' not in rust_text("shared/src/upsert.rs"):
            failures.append("shared/src/upsert.rs selection_hash is no longer 16 hex digits")
        if "metrics.files_deleted" not in calls["delete"][0][2]:
            failures.append("maintain no longer deletes (only) the files of VACUUM's dry run")
    check("the committer writes only new compacted files and selections, and deletes only VACUUM's files",
          failures)


def test_maintenance_runs_alone_on_its_schedule():
    """Maintenance is the publish binary with TIDEMARK_MAINTENANCE=1: the handler refuses
    {"maintain"} without it, so only MaintainFunction sets it, "1". It is built from the same
    crate as the publish function, runs one at a time (ReservedConcurrentExecutions: 1, the
    single writer handler.rs maintain assumes), is triggered by nothing but its schedule, is not
    retried more than once, and has the time and memory to merge files of up to the compaction
    target."""
    failures = []
    fns = resources("AWS::Serverless::Function")
    main = rust_text(PUBLISH_MAIN, PUBLISH_HANDLER)
    if 'const ENV_MAINTENANCE: &str = "TIDEMARK_MAINTENANCE";' not in main or not re.search(
            r'env::var\(ENV_MAINTENANCE\)\.is_ok_and\(\|v\| v == "1"\)', main):
        failures.append("main.rs no longer turns maintenance on with TIDEMARK_MAINTENANCE=1: update the test")
    handle = (fn_bodies(main).get("handle") or [""])[0]
    gate, refuse, run = (handle.find("if !maintenance {"), handle.find("return Err("),
                         handle.find("maintain(publisher"))
    if not (0 <= gate < refuse < run) or len(re.findall(r"\bmaintain\(", handle)) != 1:
        failures.append("handler.rs handle no longer refuses {\"maintain\"} before running it without "
                        "TIDEMARK_MAINTENANCE=1: ENTRY_POINTS cuts that call from the publish function")
    setters = sorted(fn for fn in fns if "TIDEMARK_MAINTENANCE" in function_env(fn))
    if setters != ["MaintainFunction"] or function_env("MaintainFunction").get("TIDEMARK_MAINTENANCE") != "1":
        failures.append(f"TIDEMARK_MAINTENANCE is set on {setters}: \"1\" on MaintainFunction only")
    m, pub = fns.get("MaintainFunction"), fns.get("PublishFunction")
    if m is None or pub is None:
        check("maintenance runs alone on its schedule", failures + ["no MaintainFunction / PublishFunction"])
    props = m["Properties"]
    if props.get("CodeUri") != pub["Properties"].get("CodeUri") or m.get("Metadata", {}).get(
            "BuildProperties") != pub.get("Metadata", {}).get("BuildProperties"):
        failures.append("MaintainFunction is not built as PublishFunction is (CodeUri, Metadata.BuildProperties)")
    if props.get("ReservedConcurrentExecutions") != 1:
        failures.append(f"ReservedConcurrentExecutions {props.get('ReservedConcurrentExecutions')}, not 1 (single writer)")
    if props.get("Events"):
        failures.append(f"MaintainFunction has events {sorted(props['Events'])}: its schedule is its only trigger")
    if props.get("Timeout") != 900:
        failures.append(f"Timeout {props.get('Timeout')}, not 900 (Lambda's most)")
    target = re.search(r"target_bytes:\s*(\d+)\s*<<\s*20\b", rust_text(f"{DELTA_SRC}/maintain.rs"))
    if not target:
        failures.append("maintain.rs CompactOptions::default no longer sets target_bytes as N << 20: update the test")
    # The inputs of one compacted file, the file written and the decoded row groups, besides
    # the snapshot and the ledger records: 16 x the target (2048 MB for 128 MiB).
    elif props.get("MemorySize", 128) < 16 * int(target.group(1)):
        failures.append(f"MemorySize {props.get('MemorySize')} MB < 16 x the compaction target "
                        f"({target.group(1)} MiB)")
    invoke = props.get("EventInvokeConfig") or {}
    if invoke.get("MaximumRetryAttempts") not in (0, 1):
        failures.append(f"EventInvokeConfig.MaximumRetryAttempts {invoke.get('MaximumRetryAttempts')}: 0 or 1")
    of = ((invoke.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
    if of is None or render(of) != "<ControlDeadLetterQueue>":
        failures.append(f"a failed run goes to {of}, not the control DLQ")
    fields = set(re.findall(r'(?:\bm\.get\(|\bduration\(m,\s*)"(\w+)"', (fn_bodies(main).get("maintain") or [""])[0]))
    for name, s in resources("AWS::Scheduler::Schedule").items():
        target_ = s["Properties"]["Target"]
        if render(target_["Arn"]) != "<MaintainFunction>":
            continue
        options = json.loads(target_.get("Input", "{}")).get("maintain")
        if isinstance(options, dict) and not set(options) <= fields:
            failures.append(f"{name}: options {sorted(set(options) - fields)} that handler.rs maintain does not read")
        retries = (target_.get("RetryPolicy") or {}).get("MaximumRetryAttempts")
        if not (isinstance(retries, int) and 0 <= retries <= 3):
            failures.append(f"{name}: RetryPolicy.MaximumRetryAttempts {retries}: 0-3 (deliveries)")
    check("maintenance is the publish code with TIDEMARK_MAINTENANCE=1, one run at a time, on its schedule only",
          failures)


def rust_int(expr: str) -> int:
    """A Rust integer constant expression of literals, `*` and `+` (e.g. `30 * 24 * 3600`)."""
    assert re.fullmatch(r"[\d_\s*+()]+", expr), f"cannot evaluate {expr!r}"
    return int(eval(expr.replace("_", "")))  # noqa: S307 - digits and operators only, checked above


def test_ledger_ttl_is_the_attribute_the_marks_carry():
    failures = []
    table = resources()["LedgerTable"]["Properties"]
    ttl = table.get("TimeToLiveSpecification") or {}
    text = rust_text("shared/src/aws/dynamodb.rs")
    # finish_message: .item("expires_at", AttributeValue::N((now / 1000 + MARK_TTL_S)...
    attrs = set(re.findall(r'"(\w+)",\s*AttributeValue::N\(\s*\(\s*now\s*/\s*1000\s*\+\s*MARK_TTL_S', text))
    if len(attrs) != 1:
        failures.append(f"dynamodb.rs: expected one attribute set to now + MARK_TTL_S, found {sorted(attrs)}")
    elif ttl.get("AttributeName") not in attrs or render(ttl.get("Enabled")).lower() != "true":
        failures.append(f"LedgerTable TimeToLiveSpecification {ttl}: expected {sorted(attrs)[0]!r}, enabled")
    m = re.search(r"const MARK_TTL_S: i64 = ([^;]+);", text)
    if not m:
        failures.append("dynamodb.rs no longer declares MARK_TTL_S")
    else:
        mark_ttl = rust_int(m.group(1))
        # A mark that expired before its message could be redelivered would let the message
        # count twice.
        for name, q in resources("AWS::SQS::Queue").items():
            retention = q["Properties"].get("MessageRetentionPeriod", 345600)
            if retention >= mark_ttl:
                failures.append(f"{name} keeps messages {retention} s, not less than the mark TTL {mark_ttl} s")
    check("the ledger table's TTL is the attribute the message marks carry, and outlives any redelivery", failures)


def test_inventory_access_only_when_a_bucket_is_named():
    failures = []
    param = template()["Parameters"].get("InventoryBucketName")
    if param is None or param.get("Default") != "":
        failures.append("InventoryBucketName must exist with default \"\" (no inventory access)")
    cond = template()["Conditions"].get(CONDITIONAL_KINDS["inventory"])
    if cond != {"Fn::Not": [{"Fn::Equals": [{"Ref": "InventoryBucketName"}, ""]}]}:
        failures.append(f"Condition {CONDITIONAL_KINDS['inventory']} is {cond}, not InventoryBucketName != ''")
    # Nothing but the planner's conditional statements names the inventory bucket.
    for name, doc in all_policy_documents():
        for st in statements(doc):
            names_it = "<InventoryBucketName>" in render_tree(st.get("Resource"))
            if names_it and (name != role_of("BackfillFunction") or st.get(CONDITION) != CONDITIONAL_KINDS["inventory"]):
                failures.append(f"{name} statement {st.get('Sid')!r} grants on the inventory bucket "
                                f"outside `!If [{CONDITIONAL_KINDS['inventory']}, ...]` of the backfill role")
    check("the inventory bucket is granted only when InventoryBucketName is set, to the planner only", failures)


def alarms() -> dict:
    return resources("AWS::CloudWatch::Alarm")


def alarm_on(namespace_ok, metric: str, dimension: tuple[str, str] | None = None) -> list[str]:
    found = []
    for name, a in alarms().items():
        p = a["Properties"]
        if p.get("MetricName") != metric or not namespace_ok(render(p.get("Namespace", ""))):
            continue
        dims = {d["Name"]: render(d["Value"]) for d in p.get("Dimensions", [])}
        if dimension and dims.get(dimension[0]) != dimension[1]:
            continue
        found.append(name)
    return found


def filters_into(metric: str) -> dict[str, dict]:
    return {n: f for n, f in resources("AWS::Logs::MetricFilter").items()
            if any(t["MetricName"] == metric for t in f["Properties"]["MetricTransformations"])}


def test_alarms_present():
    failures = []
    stack_ns = lambda ns: ns == "tidemark/STACK"  # noqa: E731
    dlqs = dead_letter_targets()
    for q in dlqs:
        if not alarm_on(lambda ns: ns == "AWS/SQS", "ApproximateNumberOfMessagesVisible", ("QueueName", f"<{q}.QueueName>")):
            failures.append(f"no DLQ-depth alarm on {q}")
    for q in resources("AWS::SQS::Queue"):
        if q not in dlqs and not alarm_on(lambda ns: ns == "AWS/SQS", "ApproximateAgeOfOldestMessage", ("QueueName", f"<{q}.QueueName>")):
            failures.append(f"no oldest-message-age alarm on {q}")
    for fn in FUNCTIONS:
        if not alarm_on(lambda ns: ns == "AWS/Lambda", "Errors", ("FunctionName", f"<{fn}>")):
            failures.append(f"no Errors alarm on {fn}")
    for fn in sorted({fn for fn, _, _ in stream_events()}):
        if not alarm_on(lambda ns: ns == "AWS/Lambda", "IteratorAge", ("FunctionName", f"<{fn}>")):
            failures.append(f"no IteratorAge alarm on {fn} (how far it lags behind its stream)")
    if not alarm_on(stack_ns, "QuarantinedObjects"):
        failures.append("no alarm on quarantined objects")
    # Every function that runs the per-object pipeline quarantines through it: each of their
    # log groups feeds the metric; a function that does not run it has no such filter.
    fed = {render(f["Properties"]["LogGroupName"]) for f in filters_into("QuarantinedObjects").values()}
    for fn in FUNCTIONS:
        lg = render(resources()[fn]["Properties"]["LoggingConfig"]["LogGroup"])
        runs_pipeline = "shared/src/process.rs" in FUNCTION_CODE[fn]
        if runs_pipeline and lg not in fed:
            failures.append(f"{fn}'s log group {lg} does not feed QuarantinedObjects")
        if not runs_pipeline and lg in fed:
            failures.append(f"{fn} runs no pipeline, yet its log group {lg} feeds QuarantinedObjects")
    # Reconcile's findings: alarms on metrics counted from the reconcile log group.
    reconcile_lg = render(resources()["ReconcileFunction"]["Properties"]["LoggingConfig"]["LogGroup"])
    for field in ("Mismatches", "Missing", "FreshnessBreached"):
        metrics = [t["MetricName"] for f in resources("AWS::Logs::MetricFilter").values()
                   if render(f["Properties"]["LogGroupName"]) == reconcile_lg
                   and f"$.{field}" in f["Properties"]["FilterPattern"]
                   for t in f["Properties"]["MetricTransformations"]]
        if not any(alarm_on(stack_ns, m) for m in metrics):
            failures.append(f"no alarm on reconcile {field} (a metric filter on {reconcile_lg} for $.{field} and its alarm)")
    for name, a in alarms().items():
        if not a["Properties"].get("AlarmActions"):
            failures.append(f"{name}: no AlarmActions")
    check("alarms on DLQ depth, oldest message age, function errors, stream lag, quarantined objects and "
          "reconcile findings", failures)


def test_rows_kept_aside_and_ignored_values_are_counted_per_stack():
    # Each field reconcile prints for what did not land in its column (reconcile.rs
    # metric_lines: "RejectedRows", "RescuedRows", "IgnoredValues") feeds a stack-scoped
    # metric, shown on the dashboard per source; like rejected rows, none has an alarm of its
    # own (a source may expect some).
    reconcile_lg = render(resources()["ReconcileFunction"]["Properties"]["LoggingConfig"]["LogGroup"])
    printed = rust_text("shared/src/reconcile.rs")
    dashboard = json.dumps(resources("AWS::CloudWatch::Dashboard"))
    failures = []
    for field in ("RejectedRows", "RescuedRows", "IgnoredValues"):
        if f'"{field}": s.' not in printed:
            failures.append(f"reconcile.rs metric_lines does not print {field}")
        metric = f"Reconcile{field}"
        fed = [f for f in filters_into(metric).values()
               if render(f["Properties"]["LogGroupName"]) == reconcile_lg
               and f"$.{field}" in f["Properties"]["FilterPattern"]]
        if not fed:
            failures.append(f"no metric filter on the reconcile log group for $.{field} into {metric}")
        if field not in dashboard:
            failures.append(f"the dashboard does not show {field} per source")
        if any(a["Properties"].get("MetricName") == metric for a in alarms().values()):
            failures.append(f"{metric} has an alarm, RejectedRows has none")
    check("rejected and rescued rows and ignored values counted from the reconcile log group and "
          "shown per source", failures)


def test_the_lake_emits_no_events():
    failures = []
    lake = resources().get("LakeBucket")
    if lake is None:
        failures.append("no LakeBucket")
    elif "NotificationConfiguration" in lake["Properties"]:
        failures.append("LakeBucket has a NotificationConfiguration")
    for name, rule in resources("AWS::Events::Rule").items():
        pattern = rule["Properties"].get("EventPattern", {})
        text = render_tree(pattern)
        if "<lake>" in text:
            failures.append(f"{name} matches the lake bucket")
        if pattern.get("source") == ["aws.s3"]:
            names = [render(n) for n in pattern.get("detail", {}).get("bucket", {}).get("name", [])]
            if names != ["<landing>"]:
                failures.append(f"{name}: an S3 rule must match the landing bucket only, matches {names}")
    for name, p in resources("AWS::Lambda::Permission").items():
        if "s3" in render(p["Properties"].get("Principal", "")):
            failures.append(f"{name}: S3 may invoke a function directly")
    for fn, f in resources("AWS::Serverless::Function").items():
        for ev in (f["Properties"].get("Events") or {}).values():
            if ev["Type"] in ("S3", "EventBridgeRule", "CloudWatchEvent"):
                failures.append(f"{fn} has a {ev['Type']} event: the event path is the IngestRule only")
    for role in resources("AWS::IAM::Role").values():
        granted, _ = role_grants(role)
        if ("s3:PutObject", "arn:aws:s3:::<landing>/*") in granted:
            failures.append("a role may write to the landing bucket (outputs would come back as events)")
    check("the lake bucket has no notifications and no rule matches it", failures)


def render_tree(x) -> str:
    if isinstance(x, dict) and len(x) == 1 and next(iter(x)).startswith(("Ref", "Fn::")):
        return render(x)
    if isinstance(x, dict):
        return "{" + ",".join(f"{k}:{render_tree(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ",".join(render_tree(v) for v in x) + "]"
    return str(x)


def env_reads(fn: str) -> set[str]:
    """Variables the function's code reads with std::env (`env::var` / `env::var_os`, given a
    literal or a constant, path-qualified or not: `std::env::var_os(tidemark::aws::ENV_X)`), or
    through a helper that takes the variable's name (`aws::queue_from_env(ENV_X)`)."""
    # The function's crate, and the committer library where the function runs it.
    libraries = [DELTA_SRC] if DELTA_SRC in FUNCTION_CODE[fn] else []
    text = rust_text("shared/src", FUNCTION_CODE[fn][0], *libraries)
    consts = dict(re.findall(r'const (\w+): &str = "([A-Z][A-Z0-9_]*)";', text))
    readers = r"(?:env::var(?:_os)?|queue_from_env)"
    names = set(re.findall(readers + r'\(\s*"([A-Z][A-Z0-9_]*)"', text))
    names |= {consts[c] for c in re.findall(readers + r"\(\s*(?:\w+::)*([A-Z][A-Z0-9_]*)\s*\)", text) if c in consts}
    return names


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_environment_is_exactly_what_the_code_reads(fn):
    failures = []
    env = set(function_env(fn))
    if env != ENV[fn]:
        failures.append(f"the template sets {sorted(env)}; the code reads {sorted(ENV[fn])}")
    reads = env_reads(fn)
    for name in sorted(ENV[fn] - reads):
        if name not in LIBRARY_ENV:
            failures.append(f"ENV lists {name}, which no code or library of {fn} reads")
    for name in sorted(reads - ENV[fn]):
        if name not in UNSET_ENV:
            failures.append(f"the code reads {name}: set it in the template (and ENV) or say in UNSET_ENV why not")
    if "try_from_default_env" not in (ROOT / "shared/src/telemetry.rs").read_text():
        failures.append("telemetry.rs no longer reads RUST_LOG (EnvFilter::try_from_default_env)")
    check(f"{fn}: the environment variables are exactly the ones the code reads", failures)


# ---------------------------------------------------------------------------------------------
# The default sources document against the types of shared/src/config.rs
# ---------------------------------------------------------------------------------------------
def serde_types():
    """Structs (fields: name -> (type, required)) and enums (variant names) of the config."""
    text = (ROOT / "shared/src/config.rs").read_text() + "\n" + (ROOT / "shared/src/schema.rs").read_text()
    structs, enums = {}, {}
    for attrs, name, body in re.findall(r"((?:#\[[^\]]*\]\s*)*)pub struct (\w+) \{\n(.*?)\n\}", text, re.S):
        if "Deserialize" not in attrs:
            continue
        fields, pending = {}, ""
        for line in body.split("\n"):
            line = line.strip()
            if line.startswith("#["):
                pending += line
            elif m := re.match(r"pub (\w+): (.+),$", line):
                field, ty = m.groups()
                key = re.search(r'rename = "(\w+)"', pending)
                optional = "default" in pending or ty.startswith("Option<")
                fields[key.group(1) if key else field] = (ty, not optional)
                pending = ""
            elif not line.startswith("///"):
                pending = ""
        structs[name] = (fields, "deny_unknown_fields" in attrs)
    for attrs, name, body in re.findall(r"((?:#\[[^\]]*\]\s*)*)pub enum (\w+) \{\n(.*?)\n\}", text, re.S):
        rename = re.search(r'rename_all = "(\w+)"', attrs)
        if "Deserialize" not in attrs or not rename:
            continue
        variants = re.findall(r"(?m)^\s+(\w+),$", body)
        conv = (lambda v: re.sub(r"(?<!^)([A-Z])", r"_\1", v).lower()) if rename.group(1) == "snake_case" else str.lower
        enums[name] = {conv(v) for v in variants}
    return structs, enums


COLUMN_TYPE = re.compile(r"^(int32|int64|float32|float64|string|bool|date|timestamp|decimal\(\d+,\d+\))$")


def validate(value, ty: str, path: str, structs, enums, failures):
    inner = re.sub(r"^(Option|Vec)<(.+)>$", r"\2", ty)
    if ty.startswith("Vec<"):
        if not isinstance(value, list):
            failures.append(f"{path}: expected a list")
            return
        for i, v in enumerate(value):
            validate(v, inner, f"{path}[{i}]", structs, enums, failures)
        return
    if inner in structs:
        fields, strict = structs[inner]
        if not isinstance(value, dict):
            failures.append(f"{path}: expected an object ({inner})")
            return
        for k in value:
            if strict and k not in fields:
                failures.append(f"{path}.{k}: unknown field (config.rs {inner} refuses unknown fields)")
        for k, (fty, required) in fields.items():
            if k in value:
                validate(value[k], fty, f"{path}.{k}", structs, enums, failures)
            elif required:
                failures.append(f"{path}.{k}: required by config.rs {inner}")
    elif inner in enums:
        if value not in enums[inner]:
            failures.append(f"{path}: {value!r} is not one of {sorted(enums[inner])}")
    elif inner == "ColumnType":
        if not COLUMN_TYPE.match(str(value)):
            failures.append(f"{path}: {value!r} is not a column type")


def default_sources_document() -> str:
    cfg = globals_env()["TIDEMARK_CONFIG"]
    assert "Fn::If" in cfg, "TIDEMARK_CONFIG must be !If [UseSampleSources, <sample>, !Ref SourcesConfig]"
    cond, sample, custom = cfg["Fn::If"]
    assert cond == "UseSampleSources" and render(custom) == "<SourcesConfig>"
    return render(sample)


def test_default_sources_document_parses_with_the_fields_config_rs_accepts():
    failures = []
    text = default_sources_document()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        check("the default TIDEMARK_CONFIG is JSON", [str(e)])
    structs, enums = serde_types()
    for needed in ("ConfigDoc", "SourceDoc", "ReportsDoc", "OutputDoc", "ColumnSpec"):
        if needed not in structs:
            failures.append(f"config.rs / schema.rs no longer declares {needed}: update the test")
    validate(doc, "ConfigDoc", "config", structs, enums, failures)
    if len(text.encode()) > 3800:
        failures.append(f"{len(text)} bytes: over the 3800 the parameter allows (Lambda's 4 KB environment)")
    sources = doc.get("sources", [])
    ids = [s.get("source_id") for s in sources]
    if len(set(ids)) != len(ids):
        failures.append(f"duplicate source ids {ids}")
    for s in sources:
        sid = s.get("source_id")
        if s.get("bucket") != "<landing>":
            failures.append(f"{sid}: reads {s.get('bucket')}, not the landing bucket (the only one granted)")
        if s.get("output", {}).get("bucket") != "<lake>":
            failures.append(f"{sid}: writes {s.get('output', {}).get('bucket')}, not the lake (the only one granted)")
        names = {c["name"] for c in s.get("schema", [])}
        if not set(s.get("sum_columns", [])) <= names:
            failures.append(f"{sid}: sum_columns outside the schema")
    reports = doc.get("reports")
    if not reports:
        failures.append("no top-level 'reports': scheduled reconcile refuses to run (config.rs / reconcile.rs NoReports)")
    else:
        if reports.get("bucket") != "<lake>":
            failures.append(f"reports go to {reports.get('bucket')}, not the lake (the only bucket reconcile may write)")
        prefix = reports.get("prefix", "")
        if not prefix.startswith("_"):
            failures.append(f"reports prefix {prefix!r}: should start with '_' (hidden from Athena / Hive)")
        for s in sources:
            out = s.get("output", {}).get("prefix", "")
            if out.startswith(prefix) or prefix.startswith(out):
                failures.append(f"reports prefix {prefix!r} overlaps the output prefix {out!r} of {s.get('source_id')}")
    # The same document as infra/sample/sources.json, with this stack's bucket names.
    sample = json.loads((ROOT / "infra/sample/sources.json").read_text())
    for s in sample["sources"]:
        s["bucket"] = "<landing>"
        s["output"]["bucket"] = "<lake>"
    if sample["sources"] != sources:
        failures.append("the sources differ from infra/sample/sources.json (bucket names aside)")
    check("the default sources document parses with the fields config.rs accepts", failures)


def test_the_catalog_step_writes_every_table_at_each_deploy():
    """No Glue table is written by hand in the template: the catalog step (a custom resource
    served by the maintenance function, tidemark_delta::catalog::custom_resource) writes one per
    source from the sources document. Its properties are what the document is made of (so a
    change of it runs the step again), it names the stack's database, and every function
    that reads the document is updated after it (a refused change rolls the deploy back
    before they run under it)."""
    failures = []
    if resources("AWS::Glue::Table"):
        failures.append(f"Glue tables written by hand: {sorted(resources('AWS::Glue::Table'))}")
    if resources("AWS::Glue::Crawler"):
        failures.append("a crawler: the catalog step and partition projection make it unnecessary")
    if len(resources("AWS::Glue::Database")) != 1:
        failures.append("not exactly one Glue database")
    steps = resources("Custom::TidemarkCatalog")
    if list(steps) != ["CatalogSync"]:
        failures.append(f"catalog steps: {sorted(steps)}, not [CatalogSync]")
    else:
        props = steps["CatalogSync"]["Properties"]
        want = {
            "ServiceToken": "<MaintainFunction>",  # GetAtt .Arn renders as the resource
            "Database": "<GlueDatabase>",
            "Sources": "<SourcesConfig>",
            "Landing": "<landing>",
            "Lake": "<lake>",
        }
        for k, v in want.items():
            if render(props.get(k, "")) != v:
                failures.append(f"CatalogSync.{k} is {render(props.get(k, ''))!r}, not {v!r}")
        if not 60 <= int(props.get("ServiceTimeout", 3600)) <= 3600:
            failures.append("CatalogSync.ServiceTimeout out of 60..3600")
    # The default document is made only of the sample text and the bucket names.
    doc = render(globals_env()["TIDEMARK_CONFIG"])
    if "<landing>" not in doc or "<lake>" not in doc or "<SourcesConfig>" not in doc:
        failures.append("TIDEMARK_CONFIG is made of more than SourcesConfig and the bucket names: "
                        "CatalogSync's properties would miss a change")
    for fn in FUNCTIONS:
        if fn == "MaintainFunction":
            continue
        if resources()[fn].get("DependsOn") not in ("CatalogSync", ["CatalogSync"]):
            failures.append(f"{fn} is not updated after CatalogSync (DependsOn)")
    if function_env("MaintainFunction").get("TIDEMARK_GLUE_DATABASE") != {"Ref": "GlueDatabase"}:
        failures.append("MaintainFunction's TIDEMARK_GLUE_DATABASE is not the stack's database")
    catalog = rust_text(f"{DELTA_SRC}/catalog.rs")
    if 'pub const ENV_DATABASE: &str = "TIDEMARK_GLUE_DATABASE";' not in catalog:
        failures.append("catalog.rs no longer reads the database from TIDEMARK_GLUE_DATABASE: update the test")
    main = rust_text(PUBLISH_HANDLER)
    if not re.search(r'get\("ResponseURL"\).*get\("RequestType"\)', main):
        failures.append("handler.rs no longer recognises CloudFormation's request: update the test")
    check("the catalog step writes the tables from the sources document at each deploy, before the functions",
          failures)


def test_glue_grants_are_the_catalog_steps_and_no_more():
    """Only the maintenance role may touch Glue: the three table calls the catalog step makes,
    on the catalog, the stack's database and its tables (no delete, no other database, no
    partition calls: partition projection needs none)."""
    failures = []
    for name, role in resources("AWS::IAM::Role").items():
        granted, _ = role_grants(role)
        glue = {(a, r) for a, r in granted if a.startswith("glue:")}
        if name == role_of("MaintainFunction"):
            want = {(a, r) for a in ("glue:GetTable", "glue:CreateTable", "glue:UpdateTable")
                    for r in GLUE_TABLE_ARNS}
            if glue != want:
                failures.append(f"{name}: Glue grants {fmt(glue)}; expected {fmt(want)}")
        elif glue:
            failures.append(f"{name}: Glue grants {fmt(glue)}; only the maintenance role may write the catalog")
    check("Glue: the catalog step's three table calls on the stack's database, nothing else", failures)


def test_log_level_keeps_the_metric_lines():
    """The quarantine filter counts INFO lines and EMF lines carry no level (Lambda: INFO)."""
    allowed = set(template()["Parameters"]["LogLevel"]["AllowedValues"])
    check("LogLevel cannot drop the INFO lines the alarms count",
          [f"LogLevel allows {sorted(allowed - {'info', 'debug', 'trace'})}"] if allowed - {"info", "debug", "trace"} else [])


# The scheduled functions: what their handler takes as the scheduled run, and the source text
# it decides on (checked to be still there).
SCHEDULED = {
    # reconcile::handle: a scheduled run iff detail-type == "Scheduled Event".
    "ReconcileFunction": (lambda p: p.get("detail-type") == "Scheduled Event",
                          "shared/src/reconcile.rs", ["Scheduled Event"]),
    # publish's handler.rs: no "Records" (not a stream batch) and no "maintain" is a sweep;
    # without "source" of every table source (the scheduled-event shape would carry
    # "source": "aws.scheduler").
    "PublishFunction": (lambda p: "Records" not in p and "maintain" not in p and "source" not in p,
                        PUBLISH_HANDLER, ['payload.get("Records")', 'payload.get("maintain")', 'payload.get("source")']),
    # The same handler.rs: {"maintain": {...}} (an object of options) is a maintenance run.
    "MaintainFunction": (lambda p: "Records" not in p and isinstance(p.get("maintain"), dict),
                         PUBLISH_HANDLER, ['payload.get("Records")', 'payload.get("maintain")']),
}
# Schedules that may be turned off by their parameter: schedule -> its condition.
OPTIONAL_SCHEDULES = {"PublishSweepSchedule": "SweepOnSchedule", "MaintainSchedule": "MaintainOnSchedule"}


def test_schedules_send_the_payload_their_handler_recognises():
    failures = []
    schedules = resources("AWS::Scheduler::Schedule")
    rules = [r for r in resources("AWS::Events::Rule").values() if "ScheduleExpression" in r["Properties"]]
    if rules:
        failures.append("a scheduled EventBridge rule: schedules are EventBridge Scheduler schedules")
    targets = {}
    for name, s in schedules.items():
        target = s["Properties"]["Target"]
        fn = render(target["Arn"]).strip("<>")
        targets.setdefault(fn, []).append(name)
        if fn not in SCHEDULED:
            failures.append(f"{name}: targets {render(target['Arn'])}, which has no scheduled run")
            continue
        payload = json.loads(target.get("Input", "{}"))
        if not SCHEDULED[fn][0](payload):
            failures.append(f"{name}: Input {payload} is not recognised as {fn}'s scheduled run")
        if "DeadLetterConfig" not in target or "RetryPolicy" not in target:
            failures.append(f"{name}: no retry policy / DLQ")
        if s.get("Condition") != OPTIONAL_SCHEDULES.get(name):
            failures.append(f"{name}: Condition {s.get('Condition')}, expected {OPTIONAL_SCHEDULES.get(name)}")
    for fn, (_, path, marks) in SCHEDULED.items():
        if len(targets.get(fn, [])) != 1:
            failures.append(f"{fn} has schedules {targets.get(fn, [])}, not one")
        text = (ROOT / path).read_text()
        failures += [f"{path} no longer decides on {m!r}" for m in marks if m not in text]
    check("each schedule sends the payload its function's handler takes as the scheduled run", failures)


def test_dashboard_body_is_json_and_shows_every_function():
    failures = []
    for name, d in resources("AWS::CloudWatch::Dashboard").items():
        body = render(d["Properties"]["DashboardBody"])
        try:
            widgets = json.loads(body)["widgets"]
        except (json.JSONDecodeError, KeyError) as e:
            failures.append(f"{name}: the body is not a JSON dashboard after substitution: {e}")
            continue
        text = json.dumps(widgets)
        for fn in FUNCTIONS:
            if f"<{fn}>" not in text:
                failures.append(f"{name}: no widget shows {fn}")
        for q in resources("AWS::SQS::Queue"):
            if f"<{q}.QueueName>" not in text:
                failures.append(f"{name}: no widget shows the queue {q}")
        for metric in ("ReconcileMismatches", "ReconcileMissing", "Mismatches", "QuarantinedObjects"):
            if metric not in text:
                failures.append(f"{name}: no widget shows {metric}")
        if stream_events() and "IteratorAge" not in text:
            failures.append(f"{name}: no widget shows the stream consumer's IteratorAge")
    check("the dashboard parses and shows every function, every queue and the reconcile findings", failures)
