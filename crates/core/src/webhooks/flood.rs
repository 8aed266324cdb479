//! Telling a flood of requests from ordinary traffic, so handlers can make way for the listener.
//!
//! Every request answered at once (202, nobody waiting for its handler) is noted. When more
//! than `[webhooks] flood_rate` a second of them (a tenth of it within one [`WINDOW`]) come in,
//! the listener is taking in a flood, and stays so until [`LINGER`] after the last window at
//! that rate. While it is, each hook runs one handler at a time: its queue is durable, so a
//! flood costs the handlers time, never a delivery, and the cores go to recording and
//! answering requests first. Waited requests (`?wait=true`, `respond = "sync"`) are not
//! counted: their callers wait for the handler, so holding it back would slow them down and
//! take nothing in sooner.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The span requests are counted over.
pub const WINDOW: Duration = Duration::from_millis(100);
/// The default `flood_rate`, in requests a second.
pub const DEFAULT_RATE: u32 = 640;
/// The highest `flood_rate`.
pub const MAX_RATE: u32 = 10_000_000;
/// How long a flood lasts past its last window at the flood rate.
pub const LINGER: Duration = Duration::from_millis(200);

/// The listener's recent rate of requests answered at once (cheap to share: atomics only).
#[derive(Debug)]
pub struct Flood {
    /// Requests within one [`WINDOW`] that make a flood (`None`: nothing does).
    threshold: Option<u32>,
    base: Instant,
    /// Start of the current window, in milliseconds since `base`.
    window_start: AtomicU64,
    /// Requests noted in the current window.
    count: AtomicU32,
    /// Milliseconds since `base` until which the flood lasts (0: none yet).
    until: AtomicU64,
}

impl Flood {
    /// Floods of more than `rate` requests a second (0: none).
    pub fn new(rate: u32) -> Self {
        Self {
            threshold: (rate > 0).then(|| (rate / 10).max(1)),
            base: Instant::now(),
            window_start: AtomicU64::new(0),
            count: AtomicU32::new(0),
            until: AtomicU64::new(0),
        }
    }

    /// `at`, in milliseconds since `base`.
    fn stamp(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.base))
    }

    /// Notes a request answered at once.
    pub fn note(&self) {
        self.note_at(Instant::now());
    }

    fn note_at(&self, at: Instant) {
        let Some(threshold) = self.threshold else {
            return;
        };
        let now = self.stamp(at);
        let start = self.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) >= millis(WINDOW) {
            // A new window. Two notes racing here may both start it: a request or two goes
            // uncounted, which no threshold of this size notices.
            self.window_start.store(now, Ordering::Relaxed);
            self.count.store(1, Ordering::Relaxed);
            return;
        }
        let count = self.count.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if count > threshold {
            self.until
                .fetch_max(now.saturating_add(millis(LINGER)), Ordering::Relaxed);
        }
    }

    /// When the flood on now ends, if one is on (it may be extended by then).
    pub fn on_until(&self) -> Option<Instant> {
        self.on_until_at(Instant::now())
    }

    fn on_until_at(&self, at: Instant) -> Option<Instant> {
        let until = self.until.load(Ordering::Relaxed);
        (self.stamp(at) < until).then(|| self.base + Duration::from_millis(until))
    }
}

fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_begins_at_the_threshold_within_a_window_and_ends_after_the_linger() {
        let flood = Flood::new(640);
        let t0 = flood.base + Duration::from_secs(1);
        for i in 0..64u64 {
            flood.note_at(t0 + Duration::from_micros(i * 100));
        }
        assert_eq!(flood.on_until_at(t0 + Duration::from_millis(10)), None);
        let last = t0 + Duration::from_millis(10);
        flood.note_at(last);
        let until = flood.on_until_at(last).expect("a flood");
        assert_eq!(until, t0 + Duration::from_millis(10) + LINGER);
        assert!(
            flood
                .on_until_at(until - Duration::from_millis(1))
                .is_some()
        );
        assert_eq!(flood.on_until_at(until), None);
    }

    #[test]
    fn ordinary_traffic_spread_over_windows_is_no_flood() {
        let flood = Flood::new(640);
        let t0 = flood.base + Duration::from_secs(1);
        // 500 a second for ten seconds: under the rate, however long it lasts.
        for i in 0..5_000u64 {
            let at = t0 + Duration::from_millis(i * 2);
            flood.note_at(at);
            assert_eq!(flood.on_until_at(at), None, "request {i}");
        }
    }

    #[test]
    fn a_rate_of_zero_never_floods() {
        let flood = Flood::new(0);
        let t0 = flood.base + Duration::from_secs(1);
        for i in 0..10_000u64 {
            flood.note_at(t0 + Duration::from_micros(i));
        }
        assert_eq!(flood.on_until_at(t0 + Duration::from_millis(10)), None);
    }
}
