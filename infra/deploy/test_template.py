"""Invariants of template.yaml, checked by walking the template as YAML.

Run by `infra/test.sh` (step "template") with the pytest of `.local/venv-template`:

    .local/venv-template/bin/python -m pytest -q infra/deploy/test_template.py

Each test is one invariant; a failure names the invariant, then one line per offending
resource. The tables below are the contract between the Rust code and the template:

* SDK_CALLS: the AWS calls each function's code makes, read off the code (the adapters in
  shared/src/aws/, the pipeline in shared/src/process.rs, the per-function modules). The roles
  must grant exactly what these calls need, on exactly those resources: a new grant fails the
  test, and so does a new call, because the test also re-derives the calls from the source
  (`store.X(` / `ledger.X(` / `client.X()`) and compares.
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

FUNCTIONS = ("IngestFunction", "ReconcileFunction", "BackfillFunction")

# ---------------------------------------------------------------------------------------------
# The code's AWS calls, per function: (service, operation, resource). Resources:
#   landing / lake   objects of the landing / lake bucket (the sources document may name no
#                    other bucket: the SourcesConfig parameter says so and the default
#                    document is checked below)
#   table / index    the ledger table / its by_source index
#   self             the function itself
# ---------------------------------------------------------------------------------------------
PIPELINE_CALLS = {
    # shared/src/process.rs, Pipeline::process: the per-object path every function runs.
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
    "IngestFunction": PIPELINE_CALLS,
    "ReconcileFunction": PIPELINE_CALLS
    | {
        # shared/src/reconcile.rs, shared/src/reconcile/
        ("s3", "ListObjectsV2", "landing"),  # the window's prefixes
        ("s3", "GetObject", "lake"),  # outputs' footers and sum columns (ranged); the window state
        ("s3", "PutObject", "lake"),  # reports (JSON, HTML); the window state (If-Match)
        ("dynamodb", "Query", "index"),  # Ledger::list_range: by_source, bounded on the key
    },
    "BackfillFunction": PIPELINE_CALLS
    | {
        # shared/src/backfill.rs, functions/backfill/src/handler.rs
        ("s3", "ListObjectsV2", "landing"),  # list / list_after (StartAfter = continuation)
        ("dynamodb", "Query", "index"),  # Ledger::list: what is done already
        ("lambda", "Invoke", "self"),  # the next slice, InvocationType=Event
    },
}

# Which files make up each function's code path (besides the common pipeline).
COMMON_CODE = ["shared/src/process.rs", "shared/src/protocol.rs"]
FUNCTION_CODE = {
    "IngestFunction": ["functions/ingest/src", "shared/src/ingest.rs"],
    "ReconcileFunction": ["functions/reconcile/src", "shared/src/reconcile.rs", "shared/src/reconcile"],
    "BackfillFunction": ["functions/backfill/src", "shared/src/backfill.rs"],
}

# The ports' methods and the SDK operation each one's AWS adapter sends
# (shared/src/aws/s3.rs, shared/src/aws/dynamodb.rs).
STORE_METHODS = {
    "head": "HeadObject",
    "get": "GetObject",
    "get_range": "GetObject",  # Range + If-Match
    "put": "PutObject",
    "create_multipart": "CreateMultipartUpload",
    "upload_part": "UploadPart",
    "complete_multipart": "CompleteMultipartUpload",
    "abort_multipart": "AbortMultipartUpload",
    "delete": "DeleteObject",
    "list": "ListObjectsV2",
    "list_after": "ListObjectsV2",
}
LEDGER_METHODS = {
    "get": "GetItem",
    "create": "PutItem",
    "replace": "PutItem",
    "delete": "DeleteItem",  # operator: rewind / reset / forget (CLI)
    "list": "Query",
    "list_range": "Query",
    "get_many": "BatchGetItem",
    "audit": "PutItem",  # operator (CLI)
    "audit_log": "Scan",  # operator (CLI)
    "source_mode": "GetItem",  # operator (CLI)
    "set_source_mode": "PutItem",  # operator (CLI)
}
# SDK calls of the DynamoDB adapter that no Lambda makes: DynamoLedger::ensure_table, for the
# local stack and first-time setup from the CLI.
DYNAMODB_CLI_ONLY = {"CreateTable", "DescribeTable"}

# SDK operation -> IAM action.
IAM_ACTION = {
    ("s3", "GetObject"): "s3:GetObject",
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "PutObject"): "s3:PutObject",
    ("s3", "CreateMultipartUpload"): "s3:PutObject",
    ("s3", "UploadPart"): "s3:PutObject",
    ("s3", "CompleteMultipartUpload"): "s3:PutObject",
    ("s3", "AbortMultipartUpload"): "s3:AbortMultipartUpload",
    ("s3", "DeleteObject"): "s3:DeleteObject",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("dynamodb", "GetItem"): "dynamodb:GetItem",
    ("dynamodb", "PutItem"): "dynamodb:PutItem",
    ("dynamodb", "DeleteItem"): "dynamodb:DeleteItem",
    ("dynamodb", "Query"): "dynamodb:Query",
    ("dynamodb", "BatchGetItem"): "dynamodb:BatchGetItem",
    ("dynamodb", "Scan"): "dynamodb:Scan",
    ("lambda", "Invoke"): "lambda:InvokeFunction",
}
# The S3 adapter turns a 404 into "no such key" (HeadObject -> None, GetObject -> NotFound)
# and the protocol branches on it; S3 answers 404 rather than 403 for a missing key only to a
# caller with s3:ListBucket on the bucket. So a HEAD / GET on a bucket implies ListBucket on it.
ANSWERS_404 = {"HeadObject", "GetObject"}

KMS_ACTIONS = {
    # the encrypted environment (KmsKeyArn), SQS receive, ledger reads
    "kms:Decrypt",
    # SQS send to the encrypted DLQs; ledger writes
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
    "IngestFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "TIDEMARK_CONCURRENCY", "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT"},
    "ReconcileFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT"},
    "BackfillFunction": {"TIDEMARK_TABLE", "TIDEMARK_CONFIG", "RUST_LOG", "AWS_LAMBDA_LOG_FORMAT"},
}
# Read by libraries rather than by `env::var` in our code.
LIBRARY_ENV = {
    "RUST_LOG": "tracing-subscriber's EnvFilter::try_from_default_env (shared/src/telemetry.rs)",
    "AWS_LAMBDA_LOG_FORMAT": "lambda_runtime's tracing set-up",
}
# Read by the code and deliberately not set by the template.
UNSET_ENV = {
    "TIDEMARK_CONFIG_FILE": "the document is passed inline (TIDEMARK_CONFIG); no file ships in the zip",
    "TIDEMARK_BACKFILL_CHAIN": "unset = each backfill slice invokes the next (the wanted default); 'off' is for tests",
    "AWS_LAMBDA_FUNCTION_NAME": "set by Lambda itself (backfill's own name, for the next slice)",
    "AWS_ENDPOINT_URL": "S3 emulators only (path-style addressing)",
    "AWS_ENDPOINT_URL_S3": "S3 emulators only (path-style addressing)",
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


def statements(doc) -> list[dict]:
    return as_list(doc.get("Statement"))


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


def code_calls(fn: str) -> set[tuple[str, str]]:
    """(service, operation) the function's code path makes, read from the source."""
    text = rust_text(*COMMON_CODE, *FUNCTION_CODE[fn])
    calls = set()
    unknown = []
    for port, method in re.findall(r"\b(store|ledger)\.(\w+)\(", text):
        table = STORE_METHODS if port == "store" else LEDGER_METHODS
        if method not in table:
            unknown.append(f"{port}.{method}(")
            continue
        calls.add(("s3" if port == "store" else "dynamodb", table[method]))
    own = rust_text(FUNCTION_CODE[fn][0])
    for op in re.findall(r"\bclient\.(\w+)\(\)", own):
        calls.add(("lambda", pascal(op)))
    assert not unknown, f"{fn}: calls the test does not know: {unknown} (add them to STORE_METHODS / LEDGER_METHODS)"
    return calls


# =============================================================================================
# Expected grants
# =============================================================================================
def resource_arn(kind: str, fn: str) -> str:
    if kind in ("landing", "lake"):
        return f"arn:aws:s3:::<{kind}>/*"
    if kind == "table":
        return "<LedgerTable>"
    if kind == "index":
        return "<LedgerTable>/index/by_source"
    if kind == "self":
        name = render(resources()[fn]["Properties"].get("FunctionName", "<no FunctionName>"))
        return f"arn:aws:lambda:REGION:ACCOUNT:function:{name}"
    raise AssertionError(kind)


def expected_grants(fn: str) -> set[tuple[str, str]]:
    grants = set()
    for svc, op, kind in SDK_CALLS[fn]:
        action = IAM_ACTION[(svc, op)]
        arn = resource_arn(kind, fn)
        if action == "s3:ListBucket":
            arn = arn.removesuffix("/*")
        grants.add((action, arn))
        if svc == "s3" and op in ANSWERS_404:
            grants.add(("s3:ListBucket", arn.removesuffix("/*")))
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
            for action in as_list(st.get("Action")):
                for r in as_list(st.get("Resource")):
                    grants.add((action, render(r)))
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
def test_template_parses_and_declares_the_three_functions():
    funcs = resources("AWS::Serverless::Function")
    check("the template declares exactly the ingest, reconcile and backfill functions",
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
    s3 = {pascal(op) for op in re.findall(r"\.client\.(\w+)\(\)", rust_text("shared/src/aws/s3.rs"))}
    known = set(STORE_METHODS.values())
    failures += [f"shared/src/aws/s3.rs calls {op}: add it to STORE_METHODS and to the roles that reach it"
                 for op in sorted(s3 - known)]
    failures += [f"STORE_METHODS maps to {op}, which shared/src/aws/s3.rs never sends" for op in sorted(known - s3)]
    ddb = {pascal(op) for op in re.findall(r"\.client\.(\w+)\(\)", rust_text("shared/src/aws/dynamodb.rs"))}
    known = set(LEDGER_METHODS.values()) | DYNAMODB_CLI_ONLY
    failures += [f"shared/src/aws/dynamodb.rs calls {op}: add it to LEDGER_METHODS and to the roles"
                 for op in sorted(ddb - known)]
    failures += [f"LEDGER_METHODS maps to {op}, which shared/src/aws/dynamodb.rs never sends"
                 for op in sorted(known - ddb)]
    # A version-pinned request needs s3:GetObjectVersion / s3:DeleteObjectVersion, which no
    # role grants: the adapter pins with If-Match, never with versionId.
    if re.search(r"\.(set_)?version_id\(\s*[^)\s]", rust_text("shared/src/aws/s3.rs")):
        failures.append("shared/src/aws/s3.rs sends a versionId: the roles need s3:*ObjectVersion")
    check("the AWS adapters send only the operations the test's tables know", failures)


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


def test_visibility_timeout_is_six_times_the_consumer_timeout():
    failures = []
    queues = resources("AWS::SQS::Queue")
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
    check("every queue's visibility timeout is >= 6 x its consumer's timeout (+ batching window)", failures)


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
    if not alarm_on(stack_ns, "QuarantinedObjects"):
        failures.append("no alarm on quarantined objects")
    # Every function quarantines through the same pipeline: each log group feeds the metric.
    fed = {render(f["Properties"]["LogGroupName"]) for f in filters_into("QuarantinedObjects").values()}
    for fn in FUNCTIONS:
        lg = render(resources()[fn]["Properties"]["LoggingConfig"]["LogGroup"])
        if lg not in fed:
            failures.append(f"{fn}'s log group {lg} does not feed QuarantinedObjects")
    # Reconcile's findings: alarms on metrics counted from the reconcile log group.
    reconcile_lg = render(resources()["ReconcileFunction"]["Properties"]["LoggingConfig"]["LogGroup"])
    for field in ("Mismatches", "Missing"):
        metrics = [t["MetricName"] for f in resources("AWS::Logs::MetricFilter").values()
                   if render(f["Properties"]["LogGroupName"]) == reconcile_lg
                   and f"$.{field}" in f["Properties"]["FilterPattern"]
                   for t in f["Properties"]["MetricTransformations"]]
        if not any(alarm_on(stack_ns, m) for m in metrics):
            failures.append(f"no alarm on reconcile {field} (a metric filter on {reconcile_lg} for $.{field} and its alarm)")
    for name, a in alarms().items():
        if not a["Properties"].get("AlarmActions"):
            failures.append(f"{name}: no AlarmActions")
    check("alarms on DLQ depth, oldest message age, function errors, quarantined objects and reconcile findings", failures)


def test_rejected_rows_are_counted_per_stack():
    # The field reconcile prints (reconcile.rs metric_lines: "RejectedRows") feeds a
    # stack-scoped metric, shown on the dashboard per source.
    reconcile_lg = render(resources()["ReconcileFunction"]["Properties"]["LoggingConfig"]["LogGroup"])
    fed = [f for f in filters_into("ReconcileRejectedRows").values()
           if render(f["Properties"]["LogGroupName"]) == reconcile_lg
           and "$.RejectedRows" in f["Properties"]["FilterPattern"]]
    failures = [] if fed else ["no metric filter on the reconcile log group for $.RejectedRows"]
    if "RejectedRows" not in json.dumps(resources("AWS::CloudWatch::Dashboard")):
        failures.append("the dashboard does not show RejectedRows per source")
    check("rejected rows counted from the reconcile log group and shown per source", failures)


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
    """Variables the function's code reads with std::env (directly or through a constant)."""
    text = rust_text("shared/src", FUNCTION_CODE[fn][0])
    consts = dict(re.findall(r'const (\w+): &str = "([A-Z][A-Z0-9_]*)";', text))
    names = set(re.findall(r'env::var(?:_os)?\(\s*"([A-Z][A-Z0-9_]*)"', text))
    names |= {consts[c] for c in re.findall(r"env::var(?:_os)?\(\s*(?:\w+::)*([A-Z][A-Z0-9_]*)\s*\)", text) if c in consts}
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


def glue_type(column_type: str) -> str:
    return {"int32": "int", "int64": "bigint", "float32": "float", "float64": "double", "bool": "boolean"}.get(
        column_type, column_type)


def test_glue_tables_match_the_output_layout():
    failures = []
    doc = json.loads(default_sources_document())
    by_id = {s["source_id"]: s for s in doc["sources"]}
    tables = resources("AWS::Glue::Table")
    if not tables:
        failures.append("no Glue table over the lake")
    if not resources("AWS::Glue::Database"):
        failures.append("no Glue database")
    if resources("AWS::Glue::Crawler"):
        failures.append("a crawler: partition projection should make it unnecessary")
    for name, t in tables.items():
        ti = t["Properties"]["TableInput"]
        source = by_id.get(ti["Name"])
        if source is None:
            failures.append(f"{name}: no sample source {ti['Name']!r}")
            continue
        if t.get("Condition") != "UseSampleSources":
            failures.append(f"{name}: describes a sample source, so it must have Condition UseSampleSources")
        out = source["output"]
        location = f"s3://<lake>/{out['prefix']}"
        sd = ti["StorageDescriptor"]
        if render(sd["Location"]) != location:
            failures.append(f"{name}: Location {render(sd['Location'])} != {location}")
        if out.get("partitioning") != "key_date":
            failures.append(f"{name}: source {source['source_id']} is not partitioned by key_date")
        params = {k: render(v) for k, v in ti.get("Parameters", {}).items()}
        want = {
            "projection.enabled": "true",
            "projection.dt.type": "date",
            "projection.dt.format": "yyyy-MM-dd",
            "projection.dt.range": "2020-01-01,NOW",
            "storage.location.template": f"{location}dt=${{dt}}/",
        }
        for k, v in want.items():
            if params.get(k) != v:
                failures.append(f"{name}: {k} = {params.get(k)!r}, expected {v!r}")
        if [p["Name"] for p in ti.get("PartitionKeys", [])] != ["dt"]:
            failures.append(f"{name}: partition keys are not [dt]")
        if "parquet" not in sd.get("SerdeInfo", {}).get("SerializationLibrary", "").lower():
            failures.append(f"{name}: not the Parquet SerDe")
        cols = [(c["Name"], c["Type"]) for c in sd.get("Columns", [])]
        want_cols = [(c["name"], glue_type(c["type"])) for c in source["schema"]]
        if cols != want_cols:
            failures.append(f"{name}: columns {cols} != the source schema {want_cols}")
        reports = doc.get("reports", {}).get("prefix", "")
        if reports and f"s3://<lake>/{reports}".startswith(location):
            failures.append(f"{name}: its location covers the reports prefix")
    check("Glue tables: Parquet, partition projection on dt, the output layout of key_date", failures)


def test_log_level_keeps_the_metric_lines():
    """The quarantine filter counts INFO lines and EMF lines carry no level (Lambda: INFO)."""
    allowed = set(template()["Parameters"]["LogLevel"]["AllowedValues"])
    check("LogLevel cannot drop the INFO lines the alarms count",
          [f"LogLevel allows {sorted(allowed - {'info', 'debug', 'trace'})}"] if allowed - {"info", "debug", "trace"} else [])


def test_reconcile_schedule_sends_a_scheduled_event():
    failures = []
    schedules = resources("AWS::Scheduler::Schedule")
    rules = [r for r in resources("AWS::Events::Rule").values() if "ScheduleExpression" in r["Properties"]]
    if not schedules and not rules:
        failures.append("reconcile has no schedule")
    for name, s in schedules.items():
        target = s["Properties"]["Target"]
        if render(target["Arn"]) != "<ReconcileFunction>":
            failures.append(f"{name}: targets {render(target['Arn'])}")
        payload = json.loads(target.get("Input", "{}"))
        # reconcile::handle: a scheduled run iff detail-type == "Scheduled Event".
        if payload.get("detail-type") != "Scheduled Event":
            failures.append(f"{name}: Input {payload} is not recognised as a scheduled run")
        if "DeadLetterConfig" not in target or "RetryPolicy" not in target:
            failures.append(f"{name}: no retry policy / DLQ")
    if "Scheduled Event" not in (ROOT / "shared/src/reconcile.rs").read_text():
        failures.append("reconcile.rs no longer recognises 'Scheduled Event'")
    check("the reconcile schedule sends the payload the handler recognises", failures)


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
        for metric in ("ReconcileMismatches", "ReconcileMissing", "Mismatches", "QuarantinedObjects"):
            if metric not in text:
                failures.append(f"{name}: no widget shows {metric}")
    check("the dashboard parses and shows every function and the reconcile findings", failures)
