//! How long a holder may act on its lease, by its own clock.
//!
//! A lease's expiry is set by the store's clock when a renewal commits; the holder cannot
//! read that clock, and its renewal may commit at any point between being sent and being
//! answered. What the holder does know is when it *sent* the renewal: the store cannot
//! have committed before that, so the lease lasts at least `ttl` past the send, measured
//! on the store's clock. Clocks are not assumed synchronized, only to run at rates that
//! differ by at most [`DRIFT_PER_TTL`] of a TTL (NTP-kept hosts differ by parts per
//! million; a paused or suspended process is handled by measuring on a clock that
//! counts the pause, see the caller).
//!
//! So a holder that sent its last committed renewal at local time `s` acts until
//! `s + ttl − drift − grace`, where it starts ending its work (a stop signal), and has
//! it ended (`SIGKILL`) by `s + ttl − drift`: before any other holder can be granted the
//! lease. A renewal that has not committed by then extends nothing: its answer, however
//! late, moves the deadline only to its own send time plus the window.

use std::time::Duration;

/// The share of a TTL allowed for the two clocks' rates to differ, plus scheduling
/// slack of [`SLACK`]: one twentieth.
pub const DRIFT_PER_TTL: u32 = 20;

/// Scheduling slack added to the drift allowance: the time between a check of the
/// deadline and the signal it sends.
pub const SLACK: Duration = Duration::from_millis(100);

/// The longest grace a stopped command gets between its stop signal and `SIGKILL`.
pub const MAX_GRACE: Duration = Duration::from_secs(2);

/// When a holder must stop acting, relative to when it sent its last committed renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActWindow {
    /// From the send to the stop signal.
    pub act: Duration,
    /// From the stop signal to `SIGKILL`.
    pub grace: Duration,
}

impl ActWindow {
    /// The window for a lease of `ttl`: the grace is a quarter of the TTL (at most
    /// [`MAX_GRACE`]), the drift allowance a twentieth plus [`SLACK`].
    pub fn for_ttl(ttl: Duration) -> Self {
        let grace = (ttl / 4).min(MAX_GRACE);
        let drift = ttl / DRIFT_PER_TTL + SLACK;
        Self { act: ttl.saturating_sub(drift + grace), grace }
    }

    /// The instant (on the caller's clock) at which the work must be ended, `SIGKILL`
    /// included: `act + grace` after the send. Always before `ttl` after it.
    pub fn ended_by(&self) -> Duration {
        self.act + self.grace
    }
}

/// How often a holder renews a lease of `ttl`: a third of it, so two attempts fit in the
/// window before the work must stop.
pub fn renew_period(ttl: Duration) -> Duration {
    ttl / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_is_ended_before_the_lease_can_lapse_at_every_ttl() {
        for millis in [1_000u64, 2_000, 3_000, 10_000, 30_000, 300_000, 3_600_000] {
            let ttl = Duration::from_millis(millis);
            let window = ActWindow::for_ttl(ttl);
            assert!(window.ended_by() < ttl, "{ttl:?}: {window:?}");
            assert!(ttl - window.ended_by() >= ttl / DRIFT_PER_TTL, "{ttl:?}: drift allowance kept");
            assert!(window.act > renew_period(ttl), "{ttl:?}: a renewal fits before the stop");
            assert!(window.grace <= MAX_GRACE);
        }
    }

    #[test]
    fn a_thirty_second_lease_stops_its_work_about_four_seconds_early() {
        let window = ActWindow::for_ttl(Duration::from_secs(30));
        assert_eq!(window.grace, Duration::from_secs(2));
        assert_eq!(window.act, Duration::from_millis(30_000 - 1_500 - 100 - 2_000));
    }
}
