//! The heartbeat rule every reader judges a row by: a heartbeat lapses once its TTL
//! has passed, and one from further in the future than clocks drift vouches for
//! nothing.

use fleet_identity::Timestamp;

/// How far ahead of the judging clock a heartbeat may claim to be before it is not
/// believed: clocks of two hosts drift, but not by minutes.
pub const MAX_CLOCK_SKEW: time::Duration = time::Duration::minutes(5);

/// The TTL rule on a parsed heartbeat: lapsed once more than `ttl_s` seconds have passed
/// since `beat` (at exactly the boundary it has not), or when `beat` lies more than
/// [`MAX_CLOCK_SKEW`] in the future — a heartbeat from the future vouches for nothing,
/// or a crashed worker written with one would never expire.
pub fn heartbeat_lapsed(beat: Timestamp, ttl_s: u32, now: Timestamp) -> bool {
    HeartbeatJudge::at(now).judge(beat, ttl_s).1
}

/// [`heartbeat_lapsed`] for many heartbeats at one `now`, with the bound on heartbeats
/// from the future worked out once.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatJudge {
    now: Timestamp,
    latest_believable: Timestamp,
}

impl HeartbeatJudge {
    /// The judge at `now`.
    pub fn at(now: Timestamp) -> Self {
        Self { now, latest_believable: now.saturating_add(MAX_CLOCK_SKEW) }
    }

    /// When the heartbeat at `beat` lapses (see [`heartbeat_expiry`]), and whether it
    /// has (see [`heartbeat_lapsed`]).
    pub fn judge(&self, beat: Timestamp, ttl_s: u32) -> (Timestamp, bool) {
        let expiry = heartbeat_expiry(beat, ttl_s);
        (expiry, self.now > expiry || beat > self.latest_believable)
    }
}

/// When a heartbeat at `beat` with a TTL of `ttl_s` seconds lapses.
pub fn heartbeat_expiry(beat: Timestamp, ttl_s: u32) -> Timestamp {
    beat.saturating_add(time::Duration::seconds(i64::from(ttl_s)))
}
