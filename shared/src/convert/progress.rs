//! The counter a conversion moves as it goes, for a watchdog on another thread to read
//! ([`crate::watchdog`] is that watchdog), and the error of a conversion it gave up on.
//!
//! The converter moves it: the input bytes it reads, the rows it decodes, the rows a
//! partitioned output routes, spills and encodes. It lives with the converter so that the
//! converter depends on nothing outside `convert/`; the watchdog depends on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Progress of a conversion, watched from another thread: a counter every step of the
/// conversion moves, and how many of its threads are waiting on I/O that is not the
/// decoder's (the network under the input, the uploader taking the output). The default
/// watches nothing (ticks cost nothing).
#[derive(Debug, Clone, Default)]
pub struct Progress(Option<Arc<Counters>>);

#[derive(Debug, Default)]
struct Counters {
    moved: AtomicU64,
    waiting: AtomicU64,
}

impl Progress {
    /// A counter to watch.
    pub fn watched() -> Self {
        Self(Some(Arc::default()))
    }

    /// Move the counter by `n` (bytes read, rows decoded).
    pub fn tick(&self, n: u64) {
        if let Some(c) = &self.0 {
            c.moved.fetch_add(n.max(1), Ordering::Relaxed);
        }
    }

    /// Run `io`, a wait on something other than the decoder (a read from the network, a
    /// part handed to the uploader): the time it takes is not a stall. A service that hangs
    /// is the SDK's timeouts' to end, as a failure of the service, not of the object.
    pub fn wait<T>(&self, io: impl FnOnce() -> T) -> T {
        let Some(c) = &self.0 else { return io() };
        c.waiting.fetch_add(1, Ordering::SeqCst);
        let done = io();
        c.waiting.fetch_sub(1, Ordering::SeqCst);
        c.moved.fetch_add(1, Ordering::Relaxed);
        done
    }

    /// The counter.
    pub fn get(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |c| c.moved.load(Ordering::Relaxed))
    }

    /// Whether a thread of the conversion is waiting on I/O now.
    pub(crate) fn waiting(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|c| c.waiting.load(Ordering::SeqCst) > 0)
    }
}

/// Why a watched conversion gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Abandoned {
    /// No input read and no row decoded for the limit: the conversion was abandoned.
    #[error(
        "no progress for {} s (no input byte read, no row decoded): the conversion was \
         abandoned (a decoder looping on this file?)",
        .0.as_secs_f64()
    )]
    Stalled(Duration),
    /// The conversion's thread died without an answer (a panic the converter did not catch).
    #[error("the conversion's thread died: {0}")]
    Died(String),
}
