//! The AWS request budget of the event path, counted by an instrumented SDK client (an
//! interceptor on every HTTP attempt, retries included) against the local stack — not
//! estimated: a new object costs at most 2 ledger writes, 1 GET and the output PUT; a
//! duplicate event costs 1 ledger request and no S3 request; and the cost does not grow with
//! what was processed before (no listing, no scan).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use tidemark::aws::dynamodb::DynamoLedger;
use tidemark::aws::s3::S3Store;
use tidemark::process::Pipeline;
use tidemark_tests::{LEASE_MARGIN_MS, Stack, direct, orders_csv};

/// Counts requests by `service:operation`.
#[derive(Debug, Clone, Default)]
struct Requests(Arc<Mutex<BTreeMap<String, u32>>>);

impl Intercept for Requests {
    fn name(&self) -> &'static str {
        "request-counter"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map_or("unknown".into(), |m| {
            format!("{}:{}", m.service(), m.name())
        });
        *self.0.lock().unwrap().entry(op).or_default() += 1;
        Ok(())
    }
}

impl Requests {
    fn take(&self) -> BTreeMap<String, u32> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

async fn instrumented(stack: &Stack) -> (Pipeline, Requests) {
    let requests = Requests::default();
    let conf = aws_config::load_from_env().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&conf)
            .force_path_style(true)
            .interceptor(requests.clone())
            .build(),
    );
    let dynamo = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&conf)
            .interceptor(requests.clone())
            .build(),
    );
    let mut p = Pipeline::new(
        Arc::new(S3Store::new(s3)),
        Arc::new(DynamoLedger::new(dynamo, &stack.table)),
        Arc::new(stack.clock.clone()),
        stack.config(3),
    );
    p.settings.lease_margin_ms = LEASE_MARGIN_MS;
    (p, requests)
}

fn budget(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test]
async fn a_new_object_and_a_duplicate_cost_what_the_protocol_promises_however_much_came_before() {
    let stack = Stack::new().await;
    let (pipeline, requests) = instrumented(&stack).await;

    let (csv, _) = orders_csv(1, 20);
    let event = direct(vec![stack.upload_event("in/first.csv", &csv).await]);
    let r = stack.invoke(&pipeline, &event, "run-1").await;
    assert_eq!(r.summary.processed, 1);
    // The first record of a source in a process also registers the source id (one PutItem
    // per source and process; `Ledger::source_ids`); every later object costs the same 2.
    assert_eq!(
        requests.take(),
        budget(&[
            ("DynamoDB:PutItem", 3),
            ("S3:GetObject", 1),
            ("S3:PutObject", 1),
        ]),
        "the first new object of the process"
    );
    let new_object = budget(&[
        ("DynamoDB:PutItem", 2),
        ("S3:GetObject", 1),
        ("S3:PutObject", 1),
    ]);
    let (csv, _) = orders_csv(500, 20);
    let second = direct(vec![stack.upload_event("in/second.csv", &csv).await]);
    stack.invoke(&pipeline, &second, "run-1b").await;
    assert_eq!(requests.take(), new_object, "a new object");

    let r = stack.invoke(&pipeline, &event, "run-2").await;
    assert_eq!(r.summary.duplicates, 1);
    assert_eq!(
        requests.take(),
        budget(&[("DynamoDB:PutItem", 1)]),
        "a duplicate"
    );

    // Fifty more objects processed; the next new object costs exactly the same.
    for i in 0..50 {
        let (csv, _) = orders_csv(i * 100, 3);
        let e = direct(vec![
            stack.upload_event(&format!("in/bulk/{i}.csv"), &csv).await,
        ]);
        stack.invoke(&pipeline, &e, "bulk").await;
    }
    requests.take();
    let (csv, _) = orders_csv(9_999, 5);
    let event = direct(vec![stack.upload_event("in/last.csv", &csv).await]);
    stack.invoke(&pipeline, &event, "run-3").await;
    assert_eq!(
        requests.take(),
        new_object,
        "no listing, no scan, no growth"
    );
}
