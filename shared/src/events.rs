//! Decoding of S3 object events into typed [`ObjectEvent`]s, whatever way they reached the Lambda.
//!
//! One function, [`decode_invocation`], accepts every shape AWS delivers: a direct S3 event
//! notification, S3 → SQS, S3 → SNS → SQS (with or without raw message delivery), S3 → SNS →
//! Lambda, and EventBridge events from `aws.s3` (direct, or as the body of an SQS message). The
//! envelopes decode through the `aws_lambda_events` types (`SqsMessage`, `SnsRecord`,
//! `SnsMessage`, `EventBridgeEvent`, and `S3Entity` for a notification's bucket and object).
//! Where such a type would refuse what we accept, a small type of our own stands in, each with
//! the reason beside it: a notification record (moto's have no `userIdentity` or
//! `requestParameters`, and an `eventTime` without a zone), S3's EventBridge `detail` (the
//! crate has no type for it), and the `size` and EventBridge `time` values (a numeric string, a
//! numeric time). Unknown fields are ignored and fields we do not need may be missing, so
//! later AWS additions and the thinner records of local emulators such as moto (no
//! `userIdentity`, `sequencer` or `versionId`; `eventTime` without `Z`) all decode.
//! Each SQS message decodes on its own, so one malformed body fails only that message and the
//! caller can report it in a partial batch response. Events that are not object creations or
//! removals (`s3:TestEvent`, `ObjectRestore:*`, `LifecycleTransition`, …) are skipped with a
//! reason rather than treated as errors, and duplicates are kept: deduplication is the ledger's
//! job. [`Sequencer`] implements the ordering S3 documents for its `sequencer` values.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::s3::{S3Bucket, S3Entity, S3Object};
use aws_lambda_events::sns::{SnsMessage, SnsRecord};
use aws_lambda_events::sqs::SqsMessage;
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::work::WorkBatch;

/// The body S3 sends once to a new SQS or SNS destination to check it.
const TEST_EVENT: &str = "s3:TestEvent";

/// What happened to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectEventKind {
    /// An `ObjectCreated:*` notification, or an EventBridge `Object Created` event.
    Created,
    /// An `ObjectRemoved:*` notification, or an EventBridge `Object Deleted` event.
    Removed {
        /// True when the removal only created a delete marker in a versioned bucket
        /// (`ObjectRemoved:DeleteMarkerCreated`, or EventBridge `Delete Marker Created`).
        delete_marker: bool,
    },
}

/// One object creation or removal, the same whichever shape delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The bucket name.
    pub bucket: String,
    /// The object key, decoded: usable as-is in S3 API calls.
    pub key: String,
    /// Creation or removal.
    pub kind: ObjectEventKind,
    /// The object version; `None` when absent or the literal `"null"` (unversioned objects).
    pub version_id: Option<String>,
    /// The ETag with any surrounding quotes stripped; absent on most removals.
    pub etag: Option<String>,
    /// The object size in bytes; absent on removals.
    pub size: Option<u64>,
    /// S3's per-key ordering token; absent from events that carry none (and from moto).
    pub sequencer: Option<Sequencer>,
    /// When S3 processed the request, verbatim (`eventTime`, or EventBridge `time`).
    pub event_time: Option<String>,
    /// The notification `eventName` (e.g. `ObjectCreated:Put`) or EventBridge `detail-type`
    /// (e.g. `Object Created`), verbatim.
    pub event_name: String,
}

/// One unit that succeeds or fails as a whole: an SQS message, an SNS record, or the whole
/// invocation for direct S3 and EventBridge deliveries.
#[derive(Debug)]
pub struct Message {
    /// The SQS `messageId`, for partial batch responses; always `Some` for
    /// [`Delivery::Sqs`] and `None` for every other delivery.
    pub id: Option<String>,
    /// The object events the message carries, in order, or why it could not be decoded.
    pub outcome: Result<Vec<ObjectEvent>, EventError>,
    /// Human-readable reasons for each part of the message that was deliberately ignored,
    /// e.g. `"s3:TestEvent"`.
    pub skipped: Vec<String>,
    /// A batch of work items of a bulk job (an SQS body `{"tidemark": "work", …}` sent by the
    /// backfill planner) instead of object events; `outcome` is then an empty list.
    pub work: Option<WorkBatch>,
}

/// How the invocation reached the Lambda (its top-level shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// An S3 event notification invoking the Lambda directly, or S3's test message on its own.
    Direct,
    /// An SQS event source mapping; each record's body may hold any supported shape.
    Sqs,
    /// An SNS subscription invoking the Lambda directly.
    Sns,
    /// An EventBridge rule invoking the Lambda directly.
    EventBridge,
}

/// A decoded Lambda invocation.
#[derive(Debug)]
pub struct Invocation {
    /// The top-level shape.
    pub delivery: Delivery,
    /// The messages, in delivery order: one per SQS or SNS record, otherwise exactly one.
    pub messages: Vec<Message>,
}

/// Why a payload, a message or a field could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The top-level payload is none of the accepted shapes.
    #[error(
        "unrecognized payload: expected an S3 event notification (Records with eventSource \
         aws:s3), an SQS or SNS Lambda event (Records with aws:sqs or aws:sns), or an \
         EventBridge event with source aws.s3"
    )]
    UnrecognizedPayload,
    /// The payload has `Records` from an event source other than S3, SQS or SNS.
    #[error("unsupported Records[0] event source {0:?}: expected aws:s3, aws:sqs or aws:sns")]
    UnsupportedSource(String),
    /// An SQS body or SNS message is JSON but none of the accepted shapes.
    #[error(
        "unrecognized message: expected an S3 event notification, an s3:TestEvent, an SNS \
         notification envelope, an EventBridge event with source aws.s3, or a tidemark work \
         batch"
    )]
    UnrecognizedMessage,
    /// A required field is absent or not a string; names its path.
    #[error("missing or non-string field `{0}`")]
    MissingField(String),
    /// JSON that does not parse, or does not have the expected structure.
    #[error("invalid {context}: {source}")]
    Json {
        /// What was being decoded, e.g. `S3 record 0`.
        context: String,
        /// The parser's description, which names the offending field.
        source: serde_json::Error,
    },
    /// A field whose value cannot be used.
    #[error("invalid `{field}` value {value:?}")]
    InvalidField {
        /// The field name.
        field: &'static str,
        /// The raw value.
        value: String,
    },
    /// A form-encoded object key that cannot be decoded.
    #[error("cannot decode object key {raw:?}: {reason}")]
    InvalidKey {
        /// The key as delivered.
        raw: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `sequencer` that is not a non-empty string of hexadecimal digits.
    #[error("invalid sequencer {0:?}: expected hexadecimal digits")]
    InvalidSequencer(String),
    /// A failure inside one SQS message, tagged with its `messageId`.
    #[error("SQS message {id}: {source}")]
    SqsMessage {
        /// The SQS `messageId`.
        id: String,
        /// What went wrong inside the message.
        source: Box<EventError>,
    },
}

/// Decodes a Lambda invocation payload in any supported shape.
///
/// Errors only when the payload as a whole is unusable: none of the accepted shapes, or an SQS
/// record without a `messageId` (which no partial batch response could name). A direct S3
/// notification or EventBridge event yields one [`Message`] (which fails as a whole if any of
/// its records is malformed); SQS and SNS yield one per record, each decoded independently.
pub fn decode_invocation(payload: &Value) -> Result<Invocation, EventError> {
    let Some(records) = payload.get("Records").and_then(Value::as_array) else {
        if is_test_event(payload) {
            // S3's test message on its own, as SNS or SQS carry it: acknowledged, not an error.
            return Ok(Invocation {
                delivery: Delivery::Direct,
                messages: vec![Message::new(
                    None,
                    Ok(Decoded::skipped(TEST_EVENT.to_owned())),
                )],
            });
        }
        if !is_eventbridge(payload) {
            return Err(EventError::UnrecognizedPayload);
        }
        return Ok(Invocation {
            delivery: Delivery::EventBridge,
            messages: vec![Message::new(None, decode_eventbridge(payload))],
        });
    };
    let source = records
        .first()
        .and_then(|r| str_field(r, "eventSource").or_else(|| str_field(r, "EventSource")));
    let (delivery, messages) = match source {
        Some("aws:sqs") => (
            Delivery::Sqs,
            records
                .iter()
                .enumerate()
                .map(|(index, record)| sqs_message(index, record))
                .collect::<Result<_, _>>()?,
        ),
        Some("aws:sns") => (
            Delivery::Sns,
            records
                .iter()
                .enumerate()
                .map(|(index, record)| Message::new(None, sns_message(index, record)))
                .collect(),
        ),
        Some("aws:s3") | None => (
            Delivery::Direct,
            vec![Message::new(None, decode_s3_records(records))],
        ),
        Some(other) => return Err(EventError::UnsupportedSource(other.to_owned())),
    };
    Ok(Invocation { delivery, messages })
}

/// Decodes an object key from an S3 event notification, which S3 form-encodes
/// (`application/x-www-form-urlencoded`): first `+` becomes a space, then `%XX` escapes are
/// decoded, so `a%2Bb+c` becomes `a+b c`.
///
/// A `%` not followed by two hexadecimal digits is an error rather than being kept literally:
/// S3 always encodes `%` itself as `%25`, so such a key did not come from S3's encoder and no
/// reading of it is safe. Decoded bytes that are not UTF-8 are an error too.
pub fn decode_form_key(raw: &str) -> Result<String, EventError> {
    let invalid = |reason| EventError::InvalidKey {
        raw: raw.to_owned(),
        reason,
    };
    let spaced = raw.replace('+', " ");
    let bytes = spaced.as_bytes();
    let malformed_escape = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed_escape {
        return Err(invalid("`%` not followed by two hexadecimal digits"));
    }
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|key| key.into_owned())
        .map_err(|_| invalid("percent-decoded bytes are not valid UTF-8"))
}

/// S3's `sequencer`: a hexadecimal token ordering the events of one object key.
///
/// Stored uppercase. Per the S3 documentation, sequencers may differ in length and compare by
/// right-padding the shorter with zeros and then comparing lexicographically, so `0A` equals
/// `0A00` and `0A1` is greater than `0A0F`. Comparisons are meaningful only between events on
/// the same key. Serializes as its string.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sequencer(String);

impl Sequencer {
    /// The sequencer as received, uppercased.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sequencer right-padded with zeros to `width` characters (trailing zeros beyond
    /// `width` dropped first), so that plain string comparison, as in a DynamoDB condition,
    /// agrees with [`Ord`]. A sequencer with more than `width` significant digits is returned
    /// longer, never truncated; string order still agrees with [`Ord`] because no significant
    /// digit is lost. Use the same `width` for every stored value.
    pub fn normalized(&self, width: usize) -> String {
        format!("{:0<width$}", self.significant())
    }

    /// The digits that matter: trailing zeros never change a padded comparison.
    fn significant(&self) -> &str {
        self.0.trim_end_matches('0')
    }
}

impl FromStr for Sequencer {
    type Err = EventError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(s.to_ascii_uppercase()))
        } else {
            Err(EventError::InvalidSequencer(s.to_owned()))
        }
    }
}

impl TryFrom<String> for Sequencer {
    type Error = EventError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Sequencer> for String {
    fn from(sequencer: Sequencer) -> Self {
        sequencer.0
    }
}

impl fmt::Display for Sequencer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq for Sequencer {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for Sequencer {}

impl Hash for Sequencer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl Ord for Sequencer {
    /// Comparing with trailing zeros trimmed is the same as comparing zero-padded to equal
    /// length: if one trimmed string is a prefix of the other, the longer one's remaining
    /// digits end in a non-zero digit, which beats the padding zeros.
    fn cmp(&self, other: &Self) -> Ordering {
        self.significant().cmp(other.significant())
    }
}

impl PartialOrd for Sequencer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What one message decoded to, before it becomes a [`Message`].
#[derive(Default)]
struct Decoded {
    events: Vec<ObjectEvent>,
    skipped: Vec<String>,
    work: Option<WorkBatch>,
}

impl Decoded {
    fn skipped(reason: String) -> Self {
        Self {
            events: Vec::new(),
            skipped: vec![reason],
            work: None,
        }
    }
}

impl Message {
    fn new(id: Option<String>, decoded: Result<Decoded, EventError>) -> Self {
        match decoded {
            Ok(Decoded {
                events,
                skipped,
                work,
            }) => Self {
                id,
                outcome: Ok(events),
                skipped,
                work,
            },
            Err(error) => Self {
                id,
                outcome: Err(error),
                skipped: Vec::new(),
                work: None,
            },
        }
    }
}

/// A notification record. Our own type rather than `aws_lambda_events`' `S3EventRecord`,
/// which requires `userIdentity` and `requestParameters` (moto's records have neither) and
/// parses `eventTime` as a timestamp with a zone (moto's has none); we keep `eventTime`
/// verbatim. Only these three fields: `s3` is decoded through the crate's `S3Entity`, and
/// kept raw until then so that skipped event types need no particular object shape.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct S3Record {
    event_name: String,
    event_time: Option<String>,
    #[serde(default)]
    s3: Value,
}

/// The object as described by EventBridge (`etag`, `version-id`; moto's EventBridge events
/// use `eTag`), or by a notification once decoded through the crate's `S3Object`. Our own
/// type because the crate has no type for S3's EventBridge `detail`, and its `S3Object`
/// spells these fields `eTag` and `versionId`.
#[derive(Deserialize)]
struct ObjectInfo {
    key: String,
    size: Option<Scalar>,
    #[serde(rename = "etag", alias = "eTag")]
    etag: Option<String>,
    #[serde(rename = "version-id", alias = "versionId")]
    version_id: Option<String>,
    sequencer: Option<Sequencer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct EventBridgeDetail {
    bucket: S3Bucket,
    object: ObjectInfo,
    deletion_type: Option<String>,
}

/// A string or a number: AWS sends `size` as a number, but a numeric string is accepted, and
/// moto sends EventBridge `time` as a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Number(serde_json::Number),
}

impl Scalar {
    fn into_string(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Number(number) => number.to_string(),
        }
    }
}

impl ObjectInfo {
    fn into_event(
        self,
        bucket: String,
        key: String,
        kind: ObjectEventKind,
        event_name: String,
        event_time: Option<String>,
    ) -> Result<ObjectEvent, EventError> {
        let size = self
            .size
            .map(|size| {
                let text = size.into_string();
                text.parse().map_err(|_| EventError::InvalidField {
                    field: "size",
                    value: text,
                })
            })
            .transpose()?;
        Ok(ObjectEvent {
            bucket,
            key,
            kind,
            version_id: self.version_id.filter(|v| v != "null"),
            etag: self
                .etag
                .map(|etag| etag.trim_matches('"').to_owned())
                .filter(|etag| !etag.is_empty()),
            size,
            sequencer: self.sequencer,
            event_time,
            event_name,
        })
    }
}

fn str_field<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value.get(name).and_then(Value::as_str)
}

fn invalid_json(context: impl Into<String>) -> impl FnOnce(serde_json::Error) -> EventError {
    let context = context.into();
    move |source| EventError::Json { context, source }
}

/// One SQS record through the crate's `SqsMessage`. Records are decoded one at a time, not as
/// the crate's `SqsEvent`, so that one that does not decode fails only its own message; its
/// `messageId` is then read from the raw record, for the partial batch response to name it.
fn sqs_message(index: usize, record: &Value) -> Result<Message, EventError> {
    let decoded: Result<SqsMessage, _> = serde_path_to_error::deserialize(record);
    let id = match &decoded {
        Ok(message) => message.message_id.clone(),
        Err(_) => str_field(record, "messageId").map(str::to_owned),
    }
    .ok_or_else(|| EventError::MissingField(format!("Records[{index}].messageId")))?;
    let outcome = decoded
        .map_err(|e| EventError::Json {
            context: format!("Records[{index}].{}", e.path()),
            source: e.into_inner(),
        })
        .and_then(|message| {
            message
                .body
                .ok_or_else(|| EventError::MissingField(format!("Records[{index}].body")))
        })
        .and_then(|body| decode_body(&body))
        .map_err(|source| EventError::SqsMessage {
            id: id.clone(),
            source: Box::new(source),
        });
    Ok(Message::new(Some(id), outcome))
}

/// One record of an SNS → Lambda invocation, through the crate's `SnsRecord`.
fn sns_message(index: usize, record: &Value) -> Result<Decoded, EventError> {
    let record: SnsRecord =
        serde_path_to_error::deserialize(record).map_err(|e| EventError::Json {
            context: format!("Records[{index}].{}", e.path()),
            source: e.into_inner(),
        })?;
    decode_body(&record.sns.message)
}

/// Is this the body S3 sends once to a new SQS or SNS destination (no type in the crate)?
fn is_test_event(value: &Value) -> bool {
    str_field(value, "Event") == Some(TEST_EVENT)
}

/// Decodes an SQS body or SNS message: an S3 notification, the S3 test event, an EventBridge
/// event, an SNS envelope around one of those (SNS → SQS without raw message delivery), or a
/// batch of work items of a bulk job.
fn decode_body(text: &str) -> Result<Decoded, EventError> {
    let body: Value = serde_json::from_str(text).map_err(invalid_json("message body"))?;
    if body.get("tidemark").is_some() {
        let work = WorkBatch::deserialize(&body).map_err(invalid_json("work batch"))?;
        return Ok(Decoded {
            work: Some(work),
            ..Decoded::default()
        });
    }
    if let Some(records) = body.get("Records").and_then(Value::as_array) {
        decode_s3_records(records)
    } else if is_test_event(&body) {
        Ok(Decoded::skipped(TEST_EVENT.to_owned()))
    } else if is_eventbridge(&body) {
        decode_eventbridge(&body)
    } else if str_field(&body, "Type") == Some("Notification") && body.get("Message").is_some() {
        // SNS → SQS: the envelope is the crate's `SnsMessage`.
        let envelope = SnsMessage::deserialize(&body).map_err(invalid_json("SNS notification"))?;
        decode_body(&envelope.message)
    } else {
        Err(EventError::UnrecognizedMessage)
    }
}

fn decode_s3_records(records: &[Value]) -> Result<Decoded, EventError> {
    let mut decoded = Decoded::default();
    for (index, record) in records.iter().enumerate() {
        let record =
            S3Record::deserialize(record).map_err(invalid_json(format!("S3 record {index}")))?;
        // AWS omits the `s3:` prefix here; some emulators keep it.
        let name = record
            .event_name
            .strip_prefix("s3:")
            .unwrap_or(&record.event_name);
        let kind = match name.split_once(':') {
            Some(("ObjectCreated", _)) => ObjectEventKind::Created,
            // A lifecycle expiration removes the object just as a DeleteObject does.
            Some(("ObjectRemoved" | "LifecycleExpiration", removal)) => ObjectEventKind::Removed {
                delete_marker: removal == "DeleteMarkerCreated",
            },
            _ => {
                decoded.skipped.push(format!(
                    "{}: not an ObjectCreated or ObjectRemoved event",
                    record.event_name
                ));
                continue;
            }
        };
        let (bucket, object) =
            s3_entity(record.s3).map_err(invalid_json(format!("S3 record {index} `s3`")))?;
        let key = decode_form_key(&object.key)?;
        decoded.events.push(object.into_event(
            bucket,
            key,
            kind,
            record.event_name,
            record.event_time,
        )?);
    }
    Ok(decoded)
}

/// The `s3` part of a notification record through the crate's `S3Entity`: the bucket name and
/// the object, key still form-encoded. All but `object.size`, which the crate reads as a
/// number only: we also accept a numeric string and report any other size as
/// [`EventError::InvalidField`], so it is taken out first and read as a [`Scalar`].
fn s3_entity(mut s3: Value) -> Result<(String, ObjectInfo), serde_json::Error> {
    let size = s3
        .get_mut("object")
        .and_then(Value::as_object_mut)
        .and_then(|object| object.remove("size"));
    let size = size
        .map(Option::<Scalar>::deserialize)
        .transpose()?
        .flatten();
    let S3Entity { bucket, object, .. } = S3Entity::deserialize(s3)?;
    let S3Object {
        key,
        e_tag,
        version_id,
        sequencer,
        ..
    } = object;
    let sequencer = sequencer
        .map(|s| s.parse::<Sequencer>())
        .transpose()
        .map_err(serde::de::Error::custom)?;
    let object = ObjectInfo {
        key: key.ok_or_else(|| serde::de::Error::missing_field("key"))?,
        size,
        etag: e_tag,
        version_id,
        sequencer,
    };
    Ok((bucket_name(bucket)?, object))
}

/// The crate's `S3Bucket` has every field optional; we need the name.
fn bucket_name(bucket: S3Bucket) -> Result<String, serde_json::Error> {
    bucket
        .name
        .ok_or_else(|| serde::de::Error::missing_field("name"))
}

fn is_eventbridge(value: &Value) -> bool {
    str_field(value, "source") == Some("aws.s3") && value.get("detail-type").is_some()
}

/// An EventBridge event through the crate's `EventBridgeEvent`, with our own type for S3's
/// `detail` (the crate has none). All but `time`, which the crate parses as a timestamp with a
/// zone: moto sends a number, and we keep it verbatim, so it is taken out first and read as a
/// [`Scalar`].
fn decode_eventbridge(value: &Value) -> Result<Decoded, EventError> {
    let mut value = value.clone();
    let time = value
        .as_object_mut()
        .and_then(|event| event.remove("time"))
        .map(Option::<Scalar>::deserialize)
        .transpose()
        .map_err(invalid_json("EventBridge `time`"))?
        .flatten();
    let event: EventBridgeEvent =
        EventBridgeEvent::deserialize(value).map_err(invalid_json("EventBridge event"))?;
    let created = match event.detail_type.as_str() {
        "Object Created" => true,
        "Object Deleted" => false,
        other => {
            return Ok(Decoded::skipped(format!(
                "{other}: not an Object Created or Object Deleted event"
            )));
        }
    };
    let context = "EventBridge `detail`";
    let EventBridgeDetail {
        bucket,
        object,
        deletion_type,
    } = EventBridgeDetail::deserialize(&event.detail).map_err(invalid_json(context))?;
    let bucket = bucket_name(bucket).map_err(invalid_json(context))?;
    let kind = if created {
        ObjectEventKind::Created
    } else {
        ObjectEventKind::Removed {
            delete_marker: deletion_type.as_deref() == Some("Delete Marker Created"),
        }
    };
    // EventBridge delivers the object key as stored, not form-encoded like notifications, so it
    // is used verbatim: decoding it would turn a literal `+` into a space.
    let key = object.key.clone();
    let event = object.into_event(
        bucket,
        key,
        kind,
        event.detail_type,
        time.map(Scalar::into_string),
    )?;
    Ok(Decoded {
        events: vec![event],
        ..Decoded::default()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde_json::json;

    use super::*;

    const S3_PUT: &str = include_str!("../fixtures/events/s3_object_created_put.json");
    const S3_REMOVED: &str = include_str!("../fixtures/events/s3_object_removed.json");
    const S3_RESTORE: &str = include_str!("../fixtures/events/s3_object_restore_completed.json");
    const SQS_S3_BATCH: &str = include_str!("../fixtures/events/sqs_s3_batch.json");
    const SQS_SNS_S3: &str = include_str!("../fixtures/events/sqs_sns_s3.json");
    const SNS_S3: &str = include_str!("../fixtures/events/sns_s3.json");
    const EB_CREATED: &str = include_str!("../fixtures/events/eventbridge_object_created.json");
    const EB_DELETED: &str = include_str!("../fixtures/events/eventbridge_object_deleted.json");
    const SQS_EB: &str = include_str!("../fixtures/events/sqs_eventbridge.json");
    const SQS_MOTO: &str = include_str!("../fixtures/events/sqs_moto.json");
    const SQS_PARTIAL: &str = include_str!("../fixtures/events/sqs_partial_failure.json");
    /// Received from moto's SQS after an upload to a bucket notifying a moto SNS topic to which
    /// the queue is subscribed (signatures and receipt handles shortened).
    const SQS_SNS_MOTO: &str = include_str!("../fixtures/events/sqs_sns_moto.json");

    fn json(fixture: &str) -> Value {
        serde_json::from_str(fixture).expect("fixture is JSON")
    }

    fn decode(payload: &Value) -> Invocation {
        decode_invocation(payload).expect("payload decodes")
    }

    /// The events of the only message of a single-message invocation.
    fn events(payload: &Value) -> Vec<ObjectEvent> {
        let mut invocation = decode(payload);
        assert_eq!(invocation.messages.len(), 1);
        invocation
            .messages
            .remove(0)
            .outcome
            .expect("message decodes")
    }

    fn seq(s: &str) -> Sequencer {
        s.parse().expect("valid sequencer")
    }

    /// A direct S3 notification whose first record's `s3.object` is patched by `edit`.
    fn put_with(edit: impl FnOnce(&mut Value)) -> Value {
        let mut payload = json(S3_PUT);
        edit(&mut payload["Records"][0]["s3"]["object"]);
        payload
    }

    #[test]
    fn direct_put_matches_the_documented_example() {
        let invocation = decode(&json(S3_PUT));
        assert_eq!(invocation.delivery, Delivery::Direct);
        let [message] = &invocation.messages[..] else {
            panic!("one message")
        };
        assert_eq!(message.id, None);
        assert!(message.skipped.is_empty());
        let events = message.outcome.as_ref().unwrap();
        assert_eq!(
            events,
            &[ObjectEvent {
                bucket: "mybucket".into(),
                key: "HappyFace.jpg".into(),
                kind: ObjectEventKind::Created,
                version_id: Some("096fKKXTRTtl3on89fVO.nfljtsv6qko".into()),
                etag: Some("d41d8cd98f00b204e9800998ecf8427e".into()),
                size: Some(1024),
                sequencer: Some(seq("0055AED6DCD90281E5")),
                event_time: Some("1970-01-01T00:00:00.000Z".into()),
                event_name: "ObjectCreated:Put".into(),
            }]
        );
    }

    #[test]
    fn removals_have_no_size_or_etag_and_flag_delete_markers() {
        let events = events(&json(S3_REMOVED));
        assert_eq!(events.len(), 2);
        let (delete, marker) = (&events[0], &events[1]);
        assert_eq!(delete.key, "photos/old photo.jpg");
        assert_eq!(
            delete.kind,
            ObjectEventKind::Removed {
                delete_marker: false
            }
        );
        assert_eq!(
            (delete.size, &delete.etag, &delete.version_id),
            (None, &None, &None)
        );
        assert_eq!(delete.event_name, "ObjectRemoved:Delete");
        assert_eq!(
            marker.kind,
            ObjectEventKind::Removed {
                delete_marker: true
            }
        );
        assert_eq!(
            marker.version_id.as_deref(),
            Some("1QW9g1Z99LUNbvaaYVpW9xDlOLU.qxgF")
        );
        assert!(delete.sequencer < marker.sequencer);
    }

    #[test]
    fn object_restore_is_skipped_with_a_reason() {
        let invocation = decode(&json(S3_RESTORE));
        let message = &invocation.messages[0];
        assert!(message.outcome.as_ref().unwrap().is_empty());
        assert_eq!(message.skipped.len(), 1);
        assert!(
            message.skipped[0].starts_with("ObjectRestore:Completed"),
            "{:?}",
            message.skipped
        );
    }

    #[test]
    fn other_event_names_are_skipped_and_the_rest_decoded() {
        let mut payload = json(S3_PUT);
        let record = payload["Records"][0].clone();
        let renamed = |name: &str| {
            let mut r = record.clone();
            r["eventName"] = name.into();
            r
        };
        payload["Records"] = json!([
            renamed("LifecycleTransition"),
            renamed("ReducedRedundancyLostObject"),
            renamed("s3:ObjectCreated:Post"),
            renamed("LifecycleExpiration:Delete"),
            renamed("ObjectRestore:Post"),
        ]);
        let invocation = decode(&payload);
        let message = &invocation.messages[0];
        let events = message.outcome.as_ref().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event_name, "s3:ObjectCreated:Post");
        assert_eq!(events[0].kind, ObjectEventKind::Created);
        assert_eq!(events[1].event_name, "LifecycleExpiration:Delete");
        assert_eq!(
            events[1].kind,
            ObjectEventKind::Removed {
                delete_marker: false
            }
        );
        assert_eq!(message.skipped.len(), 3);
        assert!(message.skipped[1].contains("ReducedRedundancyLostObject"));
    }

    #[test]
    fn sqs_batch_decodes_each_message_and_skips_the_test_event() {
        let invocation = decode(&json(SQS_S3_BATCH));
        assert_eq!(invocation.delivery, Delivery::Sqs);
        let [upload, test] = &invocation.messages[..] else {
            panic!("two messages")
        };
        assert_eq!(
            upload.id.as_deref(),
            Some("059f36b4-87a3-44ab-83d2-661975830a7d")
        );
        let events = upload.outcome.as_ref().unwrap();
        assert_eq!(events.len(), 1);
        let event = &events[0];
        assert_eq!(event.bucket, "tidemark-inbox");
        assert_eq!(event.key, "reports/2024/Q1 summary+draft.csv");
        assert_eq!(
            event.version_id, None,
            "versionId \"null\" means unversioned"
        );
        assert_eq!(
            event.etag.as_deref(),
            Some("e0fb6cb2f8e8b4d6dfd8cd1a7c9ea3a1-14")
        );
        assert_eq!(event.size, Some(73_400_320));
        assert_eq!(event.event_name, "ObjectCreated:CompleteMultipartUpload");

        assert_eq!(
            test.id.as_deref(),
            Some("2e1424d4-f796-459a-8184-9c92662be6da")
        );
        assert!(test.outcome.as_ref().unwrap().is_empty());
        assert_eq!(test.skipped, ["s3:TestEvent"]);
    }

    #[test]
    fn sns_envelope_in_sqs_and_sns_direct_decode_to_the_same_event() {
        let via_sqs = decode(&json(SQS_SNS_S3));
        assert_eq!(via_sqs.delivery, Delivery::Sqs);
        assert_eq!(
            via_sqs.messages[0].id.as_deref(),
            Some("a7f3c9e2-1b44-4f0e-9d6a-3c2b1e0f9a88")
        );
        let via_sqs = via_sqs.messages[0].outcome.as_ref().unwrap().clone();

        let direct = decode(&json(SNS_S3));
        assert_eq!(direct.delivery, Delivery::Sns);
        assert_eq!(direct.messages[0].id, None);
        let direct = direct.messages[0].outcome.as_ref().unwrap().clone();

        assert_eq!(via_sqs, direct);
        assert_eq!(direct[0].key, "incoming/你好/😊.csv");
        assert_eq!(direct[0].event_name, "ObjectCreated:Copy");
        assert_eq!(direct[0].version_id, None);
    }

    #[test]
    fn test_event_inside_sns_is_skipped() {
        let mut payload = json(SNS_S3);
        payload["Records"][0]["Sns"]["Message"] =
            json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})
                .to_string()
                .into();
        let invocation = decode(&payload);
        assert!(invocation.messages[0].outcome.as_ref().unwrap().is_empty());
        assert_eq!(invocation.messages[0].skipped, ["s3:TestEvent"]);
    }

    #[test]
    fn a_bare_test_event_is_skipped() {
        let payload = json!({"Service": "Amazon S3", "Event": "s3:TestEvent",
            "Time": "2024-05-01T09:30:00.512Z", "Bucket": "b", "RequestId": "R", "HostId": "H"});
        let invocation = decode(&payload);
        assert_eq!(invocation.delivery, Delivery::Direct);
        let [message] = &invocation.messages[..] else {
            panic!("one message")
        };
        assert!(message.outcome.as_ref().unwrap().is_empty());
        assert_eq!(message.skipped, ["s3:TestEvent"]);
    }

    #[test]
    fn eventbridge_object_created_matches_the_documented_example() {
        let invocation = decode(&json(EB_CREATED));
        assert_eq!(invocation.delivery, Delivery::EventBridge);
        assert_eq!(invocation.messages[0].id, None);
        let events = invocation.messages[0].outcome.as_ref().unwrap();
        assert_eq!(
            events,
            &[ObjectEvent {
                bucket: "amzn-s3-demo-bucket1".into(),
                key: "example-key".into(),
                kind: ObjectEventKind::Created,
                version_id: Some("IYV3p45BT0ac8hjHg1houSdS1a.Mro8e".into()),
                etag: Some("b1946ac92492d2347c6235b4d2611184".into()),
                size: Some(5),
                sequencer: Some(seq("617F08299329D189")),
                event_time: Some("2021-11-12T00:00:00Z".into()),
                event_name: "Object Created".into(),
            }]
        );
    }

    #[test]
    fn eventbridge_deletions_distinguish_delete_markers() {
        let mut payload = json(EB_DELETED);
        let marker = &events(&payload)[0];
        assert_eq!(
            marker.kind,
            ObjectEventKind::Removed {
                delete_marker: true
            }
        );
        assert_eq!(marker.size, None);
        assert!(marker.sequencer > events(&json(EB_CREATED))[0].sequencer);

        payload["detail"]["deletion-type"] = "Permanently Deleted".into();
        assert_eq!(
            events(&payload)[0].kind,
            ObjectEventKind::Removed {
                delete_marker: false
            }
        );
    }

    #[test]
    fn eventbridge_other_detail_types_are_skipped() {
        let mut payload = json(EB_CREATED);
        payload["detail-type"] = "Object Restore Completed".into();
        let invocation = decode(&payload);
        assert!(invocation.messages[0].outcome.as_ref().unwrap().is_empty());
        assert!(invocation.messages[0].skipped[0].starts_with("Object Restore Completed"));
    }

    #[test]
    fn eventbridge_in_sqs_keeps_the_key_verbatim() {
        let invocation = decode(&json(SQS_EB));
        assert_eq!(invocation.delivery, Delivery::Sqs);
        let events = invocation.messages[0].outcome.as_ref().unwrap();
        assert_eq!(events[0].key, "raw key/with+plus%25.csv");
        assert_eq!(events[0].event_name, "Object Created");
    }

    #[test]
    fn moto_records_without_optional_fields_decode() {
        let events = events(&json(SQS_MOTO));
        assert_eq!(
            events,
            [ObjectEvent {
                bucket: "tidemark-test".into(),
                key: "dir/my file.csv".into(),
                kind: ObjectEventKind::Created,
                version_id: None,
                etag: Some("5eb63bbbe01eeed093cb22bb8f5acdc3".into()),
                size: Some(11),
                sequencer: None,
                event_time: Some("2024-05-01T09:32:10.123456".into()),
                event_name: "ObjectCreated:Put".into(),
            }]
        );
    }

    #[test]
    fn moto_sns_envelopes_in_sqs_decode_through_the_crate_types() {
        let invocation = decode(&json(SQS_SNS_MOTO));
        assert_eq!(invocation.delivery, Delivery::Sqs);
        let [test, upload] = &invocation.messages[..] else {
            panic!("two messages")
        };
        assert!(test.outcome.as_ref().unwrap().is_empty());
        assert_eq!(test.skipped, ["s3:TestEvent"]);
        assert_eq!(
            upload.outcome.as_ref().unwrap(),
            &[ObjectEvent {
                bucket: "tidemark-landing".into(),
                key: "orders/live check/a+b 1.csv".into(),
                kind: ObjectEventKind::Created,
                version_id: None,
                etag: Some("233478fb39d4cfd7e4b69302e90f5454".into()),
                size: Some(7035),
                sequencer: None,
                event_time: Some("2026-12-01T20:27:07.473Z".into()),
                event_name: "ObjectCreated:Put".into(),
            }]
        );
    }

    #[test]
    fn moto_eventbridge_numeric_time_and_etag_spelling_are_accepted() {
        let mut payload = json(EB_CREATED);
        payload["time"] = json!(1714555930.5);
        let object = &mut payload["detail"]["object"];
        object["eTag"] = object["etag"].take();
        object.as_object_mut().unwrap().remove("etag");
        let event = &events(&payload)[0];
        assert_eq!(event.event_time.as_deref(), Some("1714555930.5"));
        assert_eq!(
            event.etag.as_deref(),
            Some("b1946ac92492d2347c6235b4d2611184")
        );
    }

    #[test]
    fn a_malformed_sqs_body_fails_only_its_message() {
        let invocation = decode(&json(SQS_PARTIAL));
        let [first, second, third] = &invocation.messages[..] else {
            panic!("three messages")
        };
        assert_eq!(first.outcome.as_ref().unwrap()[0].key, "batch/one.csv");
        assert_eq!(third.outcome.as_ref().unwrap()[0].key, "batch/three.csv");
        let id = "22222222-2222-4222-8222-222222222222";
        assert_eq!(second.id.as_deref(), Some(id));
        let error = second.outcome.as_ref().unwrap_err();
        assert!(
            matches!(error, EventError::SqsMessage { source, .. } if matches!(**source, EventError::Json { .. }))
        );
        let text = error.to_string();
        assert!(text.contains(id) && text.contains("message body"), "{text}");
    }

    #[test]
    fn an_unrecognized_sqs_body_fails_its_message_naming_the_shapes() {
        let mut payload = json(SQS_PARTIAL);
        payload["Records"][0]["body"] = r#"{"hello":"world"}"#.into();
        payload["Records"][1]["body"] = json!(42);
        let invocation = decode(&payload);
        let text = invocation.messages[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("11111111-") && text.contains("s3:TestEvent"),
            "{text}"
        );
        let text = invocation.messages[1]
            .outcome
            .as_ref()
            .unwrap_err()
            .to_string();
        assert!(text.contains("Records[1].body"), "{text}");
        assert!(invocation.messages[2].outcome.is_ok());
    }

    #[test]
    fn an_sqs_record_without_message_id_fails_the_invocation() {
        let mut payload = json(SQS_PARTIAL);
        payload["Records"][2]
            .as_object_mut()
            .unwrap()
            .remove("messageId");
        let error = decode_invocation(&payload).unwrap_err();
        assert!(
            error.to_string().contains("Records[2].messageId"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_record_fails_a_direct_notification_naming_the_field() {
        let missing_key = put_with(|object| {
            object.as_object_mut().unwrap().remove("key");
        });
        let invocation = decode(&missing_key);
        let text = invocation.messages[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("S3 record 0") && text.contains("`key`"),
            "{text}"
        );

        let bad_sequencer = put_with(|object| object["sequencer"] = "0055XYZ".into());
        let text = decode(&bad_sequencer).messages[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .to_string();
        assert!(text.contains("0055XYZ"), "{text}");
    }

    #[test]
    fn duplicates_are_kept() {
        let mut payload = json(S3_PUT);
        let record = payload["Records"][0].clone();
        payload["Records"] = json!([record.clone(), record]);
        let events = events(&payload);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], events[1]);

        let mut batch = json(SQS_S3_BATCH);
        let message = batch["Records"][0].clone();
        batch["Records"] = json!([message.clone(), message]);
        let invocation = decode(&batch);
        assert_eq!(invocation.messages.len(), 2);
        assert_eq!(
            invocation.messages[0].outcome.as_ref().unwrap(),
            invocation.messages[1].outcome.as_ref().unwrap()
        );
    }

    #[test]
    fn size_accepts_a_numeric_string_and_rejects_anything_else() {
        let text = put_with(|object| object["size"] = "1024".into());
        assert_eq!(events(&text)[0].size, Some(1024));
        for bad in [json!("12kB"), json!(-1), json!(1.5)] {
            let payload = put_with(|object| object["size"] = bad.clone());
            let error = decode(&payload).messages.remove(0).outcome.unwrap_err();
            assert!(
                matches!(error, EventError::InvalidField { field: "size", .. }),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn etag_quotes_and_null_version_are_normalized() {
        let payload = put_with(|object| {
            object["eTag"] = "\"abc\"".into();
            object["versionId"] = "null".into();
        });
        let event = &events(&payload)[0];
        assert_eq!(event.etag.as_deref(), Some("abc"));
        assert_eq!(event.version_id, None);
    }

    #[test]
    fn a_key_that_is_not_utf8_fails_naming_the_raw_key() {
        let payload = put_with(|object| object["key"] = "dir/%FF+x.csv".into());
        let error = decode(&payload).messages.remove(0).outcome.unwrap_err();
        assert!(error.to_string().contains("\"dir/%FF+x.csv\""), "{error}");
    }

    #[test]
    fn unrecognized_payloads_are_errors() {
        for payload in [
            json!({}),
            json!([]),
            json!("Records"),
            json!({"Records": "x"}),
        ] {
            let error = decode_invocation(&payload).unwrap_err();
            assert!(
                matches!(error, EventError::UnrecognizedPayload),
                "{payload}"
            );
            assert!(error.to_string().contains("EventBridge"));
        }
        let mut not_s3 = json(EB_CREATED);
        not_s3["source"] = "aws.ec2".into();
        assert!(matches!(
            decode_invocation(&not_s3),
            Err(EventError::UnrecognizedPayload)
        ));
        let kinesis = json!({"Records": [{"eventSource": "aws:kinesis"}]});
        let error = decode_invocation(&kinesis).unwrap_err();
        assert!(error.to_string().contains("aws:kinesis"), "{error}");
    }

    #[test]
    fn form_keys_decode_plus_before_percent() {
        for (raw, decoded) in [
            ("HappyFace.jpg", "HappyFace.jpg"),
            ("red+flower.jpg", "red flower.jpg"),
            ("a%2Bb+c", "a+b c"),
            ("c%2B%2B+notes", "c++ notes"),
            ("dir%2Fmy+file.csv", "dir/my file.csv"),
            ("100%25+done", "100% done"),
            ("%2525", "%25"),
            ("%E4%BD%A0%E5%A5%BD/%F0%9F%98%8A.csv", "你好/😊.csv"),
            ("%e4%bd%a0", "你"),
            ("already/unicode/你好", "already/unicode/你好"),
            ("%28copy%29+%281%29.txt", "(copy) (1).txt"),
        ] {
            assert_eq!(decode_form_key(raw).unwrap(), decoded, "{raw}");
        }
    }

    #[test]
    fn malformed_percent_escapes_are_errors() {
        for raw in ["%", "abc%", "%2", "%zz", "x%G1", "%%41", "50%+off"] {
            match decode_form_key(raw) {
                Err(EventError::InvalidKey { raw: named, reason }) => {
                    assert_eq!(named, raw);
                    assert!(reason.contains("hexadecimal"), "{raw}: {reason}");
                }
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_that_are_not_utf8_after_decoding_are_errors() {
        for raw in ["%FF", "ok%C3%28", "%ED%A0%80", "%C0%AF"] {
            let error = decode_form_key(raw).unwrap_err();
            assert!(
                matches!(&error, EventError::InvalidKey { reason, .. } if reason.contains("UTF-8"))
            );
            assert!(error.to_string().contains(&format!("{raw:?}")), "{error}");
        }
    }

    #[test]
    fn sequencer_parsing_validates_hex_and_uppercases() {
        assert_eq!(seq("617f08299329d189").as_str(), "617F08299329D189");
        assert_eq!(seq("0055AED6DCD90281E5").to_string(), "0055AED6DCD90281E5");
        for bad in ["", "0x12", "12G", " 12", "12 ", "-1", "+1", "١٢"] {
            assert!(
                matches!(bad.parse::<Sequencer>(), Err(EventError::InvalidSequencer(s)) if s == bad),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sequencers_compare_right_padded_with_zeros() {
        assert_eq!(seq("0A"), seq("0A00"));
        assert_eq!(seq("0a"), seq("0A"));
        assert_eq!(seq("0"), seq("000"));
        assert!(seq("0A1") > seq("0A0F"), "0A10 > 0A0F");
        assert!(seq("1") > seq("0FFFFFFFFFFFFFFFFF"));
        assert!(seq("0055AED6DCD90281E") < seq("0055AED6DCD90281E5"));
        assert!(seq("0055AED6DCD90281E5") < seq("0055AED6DCD90281F0"));
        assert!(seq("617f08299329d189") < seq("617f0837b476e463"));
        assert!(seq("617b398000000000") < seq("617f08299329d189"));
        assert_eq!(seq("617B398"), seq("617b398000000000"));
        assert_eq!(seq("0A").cmp(&seq("0A000")), Ordering::Equal);
        let mut sorted = [seq("0B"), seq("0A1"), seq("0a0f"), seq("0A")];
        sorted.sort();
        let sorted: Vec<_> = sorted.iter().map(Sequencer::as_str).collect();
        assert_eq!(sorted, ["0A", "0A0F", "0A1", "0B"]);
    }

    #[test]
    fn sequencer_hash_agrees_with_eq() {
        let set: HashSet<_> = ["0A", "0a00", "0A000000", "0A1"]
            .map(seq)
            .into_iter()
            .collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(&seq("0A0")));
    }

    #[test]
    fn normalized_sequencers_order_like_sequencers() {
        assert_eq!(seq("0a1").normalized(8), "0A100000");
        assert_eq!(seq("0A000000000").normalized(4), "0A00");
        assert_eq!(seq("0A").normalized(4), seq("0A00").normalized(4));
        assert_eq!(seq("0123456789").normalized(4), "0123456789");
        let values = [
            "0",
            "0A",
            "0A0F",
            "0A1",
            "0055AED6DCD90281E5",
            "0055AED6DCD90281E",
            "617f0837b476e463",
            "617F08299329D1890000001",
            "617F08299329D18900000011",
            "FFFFFFFFFFFFFFFFFFFFFFFF",
        ]
        .map(seq);
        for width in [4, 20] {
            for a in &values {
                for b in &values {
                    assert_eq!(
                        a.normalized(width).cmp(&b.normalized(width)),
                        a.cmp(b),
                        "{a} vs {b} at {width}"
                    );
                }
            }
        }
    }

    #[test]
    fn sequencer_serde_is_the_string() {
        assert_eq!(serde_json::to_value(seq("0a1f")).unwrap(), json!("0A1F"));
        let parsed: Sequencer = serde_json::from_value(json!("617f0837b476e463")).unwrap();
        assert_eq!(parsed.as_str(), "617F0837B476E463");
        let error = serde_json::from_value::<Sequencer>(json!("nope")).unwrap_err();
        assert!(
            error.to_string().contains("invalid sequencer \"nope\""),
            "{error}"
        );
    }
}
