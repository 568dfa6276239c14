//! The conversion watchdog: a conversion that stops making progress is abandoned, so that a
//! decoder that loops on a poison file costs its object a bounded time, not the invocation.
//!
//! - Every conversion runs on a thread of its own ([`run`]) and moves a [`Progress`] counter:
//!   the input bytes it reads and the rows it decodes (the converter's metered input and its
//!   batch loop), and the rows a partitioned output is split into.
//! - [`run`] awaits the thread and looks at the counter every second (or a quarter of the
//!   limit, when shorter). The time between two looks counts as standing still only up to
//!   two such intervals: a process the host did not run for a while (a frozen sandbox, a
//!   machine swapping) held its watcher as long as its conversion, and is not taken for a
//!   decoder that loops. When the counter has not moved for the limit, the conversion is
//!   abandoned: [`run`] answers [`Abandoned::Stalled`], which the per-object path turns into a
//!   failure of the object as bad input (counted towards `max_attempts`, so a poison file
//!   costs at most `max_attempts` × the limit before it is quarantined), and the batch's
//!   other objects go on.
//! - A thread cannot be stopped from outside, and a decoder that loops never returns: the
//!   thread is left behind, and the process is marked ([`abandoned`]). The Lambda functions
//!   exit once their answer to the invocation is posted ([`exit_if_abandoned`]), so the next
//!   invocation starts in a fresh sandbox instead of beside a spinning thread; the CLI exits
//!   when its command is done.
//! - The limit ([`stall_limit`]): `TIDEMARK_STALL_SECONDS` (default 60), and never more than
//!   a third of the time left before the invocation's deadline (at least two seconds), so
//!   the other objects of a batch keep the rest.
//! - Waiting is not standing still: the time a conversion's thread spends in a read from the
//!   network or handing a part to the uploader ([`Progress::wait`]) never counts, so a slow
//!   service is never taken for a poison file (the SDK's timeouts end a service that hangs,
//!   as a failure of the service).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use crate::convert::progress::{Abandoned, Progress};

/// The default stall limit.
pub const DEFAULT_STALL: Duration = Duration::from_secs(60);

/// Set once a conversion has been abandoned in this process.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Run the conversion `f` on a thread of its own, watched through `progress` (the counter
/// `f`'s conversion moves): its answer, or [`Abandoned`] when the counter stood still for
/// `limit` (the thread is then left behind and the process marked: [`abandoned`]).
pub async fn run<T: Send + 'static>(
    progress: &Progress,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Abandoned> {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    spawn(move || {
        let _ = tx.send(f());
    })?;
    let mut watch = Watch::new(progress, limit);
    loop {
        match tokio::time::timeout(watch.check, &mut rx).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(_)) => return Err(Abandoned::Died("no answer".into())),
            Err(_) => watch.looked()?,
        }
    }
}

/// [`run`] for a caller that is not async (the CLI's `convert` and schema inference): `f`
/// gets a watched counter to move, the calling thread is blocked on the answer.
pub fn run_blocking<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce(Progress) -> T + Send + 'static,
) -> Result<T, Abandoned> {
    use std::sync::mpsc::RecvTimeoutError;
    let progress = Progress::watched();
    let moved = progress.clone();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    spawn(move || {
        let _ = tx.send(f(moved));
    })?;
    let mut watch = Watch::new(&progress, limit);
    loop {
        match rx.recv_timeout(watch.check) {
            Ok(answer) => return Ok(answer),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Abandoned::Died("no answer".into()));
            }
            Err(RecvTimeoutError::Timeout) => watch.looked()?,
        }
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) -> Result<(), Abandoned> {
    std::thread::Builder::new()
        .name("tidemark-convert".into())
        .spawn(f)
        .map(drop)
        .map_err(|e| Abandoned::Died(format!("cannot start: {e}")))
}

/// The watcher's side of [`run`]: looks at the counter every `check`, and adds up the time
/// it stood still. Only the watcher's own intervals count, each at most twice `check`: when
/// the whole process was not running (a host that froze it, a machine swapping), the
/// conversion did not stand still any more than its watcher did, and the gap is not taken
/// for a stall.
struct Watch<'p> {
    progress: &'p Progress,
    limit: Duration,
    check: Duration,
    last: u64,
    looked_at: Instant,
    still: Duration,
}

impl<'p> Watch<'p> {
    fn new(progress: &'p Progress, limit: Duration) -> Self {
        Self {
            progress,
            limit,
            check: (limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)),
            last: progress.get(),
            looked_at: Instant::now(),
            still: Duration::ZERO,
        }
    }

    /// One look at the counter, a `check` after the last: [`Abandoned::Stalled`] once it
    /// stood still for the limit.
    fn looked(&mut self) -> Result<(), Abandoned> {
        let interval = self.looked_at.elapsed().min(self.check * 2);
        self.looked_at = Instant::now();
        let now = self.progress.get();
        if now != self.last || self.progress.waiting() {
            (self.last, self.still) = (now, Duration::ZERO);
            return Ok(());
        }
        self.still += interval;
        if self.still < self.limit {
            return Ok(());
        }
        ABANDONED.store(true, Ordering::SeqCst);
        tracing::error!(
            limit_s = self.limit.as_secs_f64(),
            "a conversion made no progress: abandoned, its thread left behind; \
             the process exits once its answer is given"
        );
        Err(Abandoned::Stalled(self.limit))
    }
}

/// [`run`] for a conversion under `spec`: the spec gets a watched counter and goes to `f` on
/// the conversion's thread; an abandoned conversion is its [`ConvertError::Abandoned`].
///
/// [`ConvertError::Abandoned`]: crate::convert::ConvertError::Abandoned
pub async fn convert<T: Send + 'static>(
    mut spec: crate::convert::ConvertSpec,
    limit: Duration,
    f: impl FnOnce(crate::convert::ConvertSpec) -> Result<T, crate::convert::ConvertError>
    + Send
    + 'static,
) -> Result<T, crate::convert::ConvertError> {
    spec.progress = Progress::watched();
    let progress = spec.progress.clone();
    run(&progress, limit, move || f(spec))
        .await
        .map_err(crate::convert::ConvertError::from)
        .and_then(|converted| converted)
}

/// Has a conversion been abandoned in this process (a thread may still be spinning)?
pub fn abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

/// The shortest stall limit, whatever the deadline says.
pub const MIN_STALL: Duration = Duration::from_secs(2);

/// The stall limit of a conversion starting `remaining_ms` before its invocation's deadline:
/// `TIDEMARK_STALL_SECONDS` (default 60), at most a third of `remaining_ms`, at least
/// [`MIN_STALL`].
pub fn stall_limit(remaining_ms: i64) -> Duration {
    let set = std::env::var("TIDEMARK_STALL_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_STALL, Duration::from_secs_f64);
    let third = Duration::from_millis(u64::try_from(remaining_ms / 3).unwrap_or(0));
    set.min(third).max(MIN_STALL)
}

/// End the process when a conversion was abandoned in it: called by the Lambda functions
/// after their answer is posted, so that the spinning thread goes with the sandbox.
pub fn exit_if_abandoned() {
    if abandoned() {
        tracing::warn!(
            "exiting: a conversion was abandoned in this process (a fresh sandbox serves the next invocation)"
        );
        std::process::exit(0);
    }
}

/// The Lambda runtime's side ([`lambda::ExitWhenAbandoned`]).
#[cfg(feature = "lambda")]
pub mod lambda {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use lambda_runtime::tower::{Layer, Service};
    use lambda_runtime::{Error, LambdaInvocation};

    /// A layer around a Lambda runtime's service: once an invocation is answered (the inner
    /// service posts the response before its future ends), the process exits if a
    /// conversion was abandoned in it ([`super::exit_if_abandoned`]). Lambda then starts a
    /// fresh sandbox for the next invocation (logging that the runtime exited); nothing is
    /// lost, no invocation is in flight.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct ExitWhenAbandoned;

    impl<S> Layer<S> for ExitWhenAbandoned {
        type Service = Exiting<S>;

        fn layer(&self, inner: S) -> Self::Service {
            Exiting(inner)
        }
    }

    /// The service of [`ExitWhenAbandoned`].
    #[derive(Debug, Clone)]
    pub struct Exiting<S>(S);

    impl<S> Service<LambdaInvocation> for Exiting<S>
    where
        S: Service<LambdaInvocation, Response = (), Error = Error>,
    {
        type Response = ();
        type Error = Error;
        type Future = ExitAfter<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
            self.0.poll_ready(cx)
        }

        fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
            ExitAfter(Box::pin(self.0.call(invocation)))
        }
    }

    /// The answer to an invocation, then [`super::exit_if_abandoned`].
    pub struct ExitAfter<F>(Pin<Box<F>>);

    impl<F: Future<Output = Result<(), Error>>> Future for ExitAfter<F> {
        type Output = Result<(), Error>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let answered = self.0.as_mut().poll(cx);
            if answered.is_ready() {
                super::exit_if_abandoned();
            }
            answered
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Slow but moving under a 100 ms limit: 30 ticks of `p` 10 ms apart.
    fn moving(p: &Progress) -> u32 {
        for _ in 0..30 {
            std::thread::sleep(Duration::from_millis(10));
            p.tick(1);
        }
        7
    }

    /// Standing still until `stop` is set.
    fn standing_still(stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[tokio::test]
    async fn a_conversion_that_moves_is_awaited_and_one_that_stands_still_is_abandoned() {
        let progress = Progress::watched();
        let p = progress.clone();
        let answer = run(&progress, Duration::from_millis(100), move || moving(&p)).await;
        assert_eq!(answer, Ok(7));
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = stop.clone();
        let started = Instant::now();
        let answer = run(
            &Progress::watched(),
            Duration::from_millis(100),
            move || standing_still(&spinning),
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        assert_eq!(answer, Err(Abandoned::Stalled(Duration::from_millis(100))));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(abandoned());
        assert!(
            answer
                .unwrap_err()
                .to_string()
                .starts_with("no progress for 0.1 s")
        );
    }

    #[tokio::test]
    async fn waiting_on_io_is_not_standing_still() {
        let progress = Progress::watched();
        let p = progress.clone();
        let answer = run(&progress, Duration::from_millis(50), move || {
            p.wait(|| std::thread::sleep(Duration::from_millis(300)));
            "read"
        })
        .await;
        assert_eq!(answer, Ok("read"));
    }

    #[test]
    fn a_blocking_caller_gets_the_same_watch() {
        let answer = run_blocking(Duration::from_millis(100), |p| moving(&p));
        assert_eq!(answer, Ok(7));
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = stop.clone();
        let answer = run_blocking(Duration::from_millis(100), move |_| {
            standing_still(&spinning)
        });
        stop.store(true, Ordering::Relaxed);
        assert_eq!(answer, Err(Abandoned::Stalled(Duration::from_millis(100))));
    }

    #[test]
    fn a_process_that_was_not_running_is_not_a_stall() {
        let progress = Progress::watched();
        let mut watch = Watch::new(&progress, Duration::from_millis(400));
        // The watcher itself was held for three limits (the process frozen, the machine
        // swapping): one look counts at most two checks of standing still.
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(watch.looked(), Ok(()));
        assert!(watch.still <= watch.check * 2, "{:?}", watch.still);
        // Standing still over its own looks, it is a stall.
        let mut looks = 0;
        while watch.looked().is_ok() {
            std::thread::sleep(watch.check);
            looks += 1;
            assert!(looks < 10, "never abandoned");
        }
        assert!(looks >= 2, "{looks}");
    }

    #[test]
    fn the_limit_leaves_the_batch_most_of_the_invocation() {
        assert_eq!(stall_limit(900_000), DEFAULT_STALL);
        assert_eq!(stall_limit(90_000), Duration::from_secs(30));
        assert_eq!(stall_limit(0), MIN_STALL);
    }
}
