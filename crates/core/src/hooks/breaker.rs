//! The per-hook firing breaker: the backstop for hook loops that go around the dispatch depth.
//!
//! A hook's process that makes its requests with the daemon's own token (plain `curl`, or a
//! `canopy` whose environment was stripped) acts as the user at depth 0, so the dispatch-depth
//! limit cannot see the loop it may start. The breaker counts each hook's firings instead: a
//! hook that fires more than `firings` times within `window` is **tripped**, its further
//! firings are recorded `dropped` with the reason, and a `hook.tripped` event is emitted once,
//! until a config reload or `canopy hooks reset NAME`.
//!
//! Hooks are told apart by source and name (`config`/`announce`, `graph`/`web.on_completed[0]`).

pub use canopy_model::records::hook_reports::TrippedHook;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use canopy_model::time::Timestamp;

/// Firings within [`DEFAULT_WINDOW`] past which a hook trips.
pub const DEFAULT_FIRINGS: u32 = 100;

/// The window [`DEFAULT_FIRINGS`] counts in.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// What the breaker says of one firing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// It runs.
    Run,
    /// This firing tripped the hook: it does not run; say so once (`hook.tripped`).
    Tripped(String),
    /// The hook was tripped before: it does not run.
    Dropped(String),
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<Instant>,
    tripped: Option<TrippedHook>,
}

/// Every hook's recent firings (see the module docs).
#[derive(Debug)]
pub struct Breakers {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    firings: u32,
    window: Duration,
    hooks: HashMap<(String, String), State>,
}

impl Default for Breakers {
    fn default() -> Self {
        Self::new(DEFAULT_FIRINGS, DEFAULT_WINDOW)
    }
}

/// Hooks with no recent firing are forgotten once there are this many.
const FORGET_PAST: usize = 4096;

impl Breakers {
    /// Breakers tripping past `firings` within `window`; `firings = 0` never trips.
    pub fn new(firings: u32, window: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner {
                firings,
                window,
                hooks: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one firing of the hook `name` of `source` now.
    pub fn admit(&self, source: &str, name: &str) -> Admit {
        self.admit_at(source, name, Instant::now())
    }

    fn admit_at(&self, source: &str, name: &str, now: Instant) -> Admit {
        let mut inner = self.lock();
        let (firings, window) = (inner.firings, inner.window);
        if firings == 0 {
            return Admit::Run;
        }
        if inner.hooks.len() >= FORGET_PAST {
            inner.hooks.retain(|_, state| {
                state.tripped.is_some()
                    || state
                        .recent
                        .back()
                        .is_some_and(|last| now.duration_since(*last) < window)
            });
        }
        let state = inner
            .hooks
            .entry((source.to_string(), name.to_string()))
            .or_default();
        if let Some(tripped) = &mut state.tripped {
            tripped.dropped += 1;
            return Admit::Dropped(tripped.reason.clone());
        }
        while state
            .recent
            .front()
            .is_some_and(|first| now.duration_since(*first) >= window)
        {
            state.recent.pop_front();
        }
        if state.recent.len() < firings as usize {
            state.recent.push_back(now);
            return Admit::Run;
        }
        let reason = format!(
            "not run: hook `{name}` fired more than {firings} times in {}s and is tripped (a loop?); `canopy hooks reset {name}` or a config reload puts it back",
            window.as_secs()
        );
        state.recent.clear();
        state.tripped = Some(TrippedHook {
            source: source.to_string(),
            hook_name: name.to_string(),
            tripped_at: Timestamp::now(),
            dropped: 1,
            reason: reason.clone(),
        });
        Admit::Tripped(reason)
    }

    /// Puts back every tripped hook named `name` (of any source); returns them.
    pub fn reset(&self, name: &str) -> Vec<TrippedHook> {
        let mut inner = self.lock();
        let mut reset = Vec::new();
        for ((_, hook), state) in &mut inner.hooks {
            if hook == name
                && let Some(tripped) = state.tripped.take()
            {
                reset.push(tripped);
            }
        }
        reset
    }

    /// Puts back every hook and takes new limits (a config reload).
    pub fn reset_all(&self, firings: u32, window: Duration) -> Vec<TrippedHook> {
        let mut inner = self.lock();
        inner.firings = firings;
        inner.window = window;
        let hooks = std::mem::take(&mut inner.hooks);
        hooks.into_values().filter_map(|s| s.tripped).collect()
    }

    /// The hooks tripped now, by name.
    pub fn tripped(&self) -> Vec<TrippedHook> {
        let mut tripped: Vec<TrippedHook> = self
            .lock()
            .hooks
            .values()
            .filter_map(|s| s.tripped.clone())
            .collect();
        tripped.sort_by(|a, b| a.hook_name.cmp(&b.hook_name));
        tripped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_trips_past_its_rate_and_stays_tripped_until_reset() {
        let breakers = Breakers::new(3, Duration::from_secs(10));
        let start = Instant::now();
        for i in 0..3 {
            assert_eq!(
                breakers.admit_at("config", "loop", start + Duration::from_secs(i)),
                Admit::Run
            );
        }
        // Another hook has a count of its own.
        assert_eq!(breakers.admit_at("config", "other", start), Admit::Run);
        let tripped = breakers.admit_at("config", "loop", start + Duration::from_secs(3));
        assert!(
            matches!(&tripped, Admit::Tripped(reason) if reason.contains("more than 3 times in 10s")),
            "{tripped:?}"
        );
        // Tripped, it stays so even once the window has passed.
        assert!(matches!(
            breakers.admit_at("config", "loop", start + Duration::from_secs(60)),
            Admit::Dropped(_)
        ));
        let listed = breakers.tripped();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].dropped, 2);
        assert_eq!(breakers.reset("loop").len(), 1);
        assert_eq!(
            breakers.admit_at("config", "loop", start + Duration::from_secs(61)),
            Admit::Run
        );
        assert!(breakers.tripped().is_empty());
    }

    #[test]
    fn firings_spread_over_time_never_trip_and_zero_turns_it_off() {
        let breakers = Breakers::new(2, Duration::from_secs(10));
        let start = Instant::now();
        for i in 0..50 {
            assert_eq!(
                breakers.admit_at("graph", "g", start + Duration::from_secs(6 * i)),
                Admit::Run
            );
        }
        let off = Breakers::new(0, Duration::from_secs(10));
        for _ in 0..1000 {
            assert_eq!(off.admit_at("graph", "g", start), Admit::Run);
        }
    }
}
