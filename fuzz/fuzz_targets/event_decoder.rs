//! `events::decode_invocation` on arbitrary JSON: any payload decodes or is refused, never a
//! panic; every decoded event has a bucket, and its sequencer orders like its normal form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::events::decode_invocation;

fuzz_target!(|data: &[u8]| {
    let Ok(payload) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(invocation) = decode_invocation(&payload) else {
        return;
    };
    for message in &invocation.messages {
        let Ok(events) = &message.outcome else {
            let _ = message.outcome.as_ref().map_err(ToString::to_string);
            continue;
        };
        for event in events {
            if let Some(seq) = &event.sequencer {
                let normal = seq.normalized(20);
                assert!(normal.len() >= 20);
                assert_eq!(
                    normal.parse::<tidemark::events::Sequencer>().ok().as_ref(),
                    Some(seq)
                );
            }
        }
    }
});
