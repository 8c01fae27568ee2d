//! The host's wall clock as its kernel keeps it, which no single process can move.
//!
//! A process's own clock can be made to lie to it alone: a preloaded library
//! (libfaketime, `LD_PRELOAD`) answers its `clock_gettime` and `gettimeofday` calls with
//! another time, while every other process of the host reads the kernel's. Such a
//! process must not judge other workers' heartbeats or stamp a lease's expiry. The
//! kernel's wall clock can also be read from two files no such library answers:
//! `/proc/stat`'s `btime` (the wall-clock second the host booted) plus `/proc/uptime`
//! (the time since, in hundredths of a second), which is the wall clock now to within
//! the second that `btime` is cut to (proc(5)).
//!
//! [`host_now`] is this process's clock when it agrees with the kernel's (the whole
//! precision of the system clock), and the kernel's when it does not; [`process_skew`]
//! says by how much this process's clock is off, when it is.

use std::time::{SystemTime, UNIX_EPOCH};

use fleet_identity::Timestamp;

/// How far this process's clock may read from the kernel's before it is taken to lie:
/// the kernel's reading is up to a second behind (`btime` is whole seconds), and the
/// two files are read a few microseconds apart.
const AGREEMENT_MS: i64 = 2_000;

/// The kernel's wall clock now, in milliseconds since the Unix epoch, from
/// `/proc/stat` and `/proc/uptime`; up to a second behind the true time. `None` where
/// those files cannot be read.
pub fn kernel_wall_clock_ms() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: i64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let (whole, hundredths) = uptime.split_whitespace().next()?.split_once('.')?;
    let whole: i64 = whole.parse().ok()?;
    let hundredths: i64 = hundredths.get(..2)?.parse().ok()?;
    Some(btime * 1000 + whole * 1000 + hundredths * 10)
}

fn process_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How far this process's clock reads from the kernel's (positive: ahead), in
/// milliseconds, when it is further than the kernel's reading can explain; `None` when
/// the two agree or the kernel's cannot be read.
pub fn process_skew_ms() -> Option<i64> {
    skew(process_clock_ms(), kernel_wall_clock_ms()?)
}

/// The skew of `process` against `kernel` (which reads up to a second behind).
fn skew(process: i64, kernel: i64) -> Option<i64> {
    // The kernel's reading is the true time less 0..1 s: centre it.
    let offset = process - (kernel + 500);
    (offset.abs() > AGREEMENT_MS).then_some(offset)
}

/// Now, on this host's clock: this process's clock when it agrees with the kernel's,
/// else the kernel's (to within half a second). No process whose clock alone was set
/// back or ahead reads another time here.
pub fn host_now() -> Timestamp {
    let process = process_clock_ms();
    let millis = match kernel_wall_clock_ms() {
        Some(kernel) if skew(process, kernel).is_some() => kernel + 500,
        _ => process,
    };
    // Any time of this era is in range; the process's own clock stands in otherwise.
    Timestamp::from_unix_millis(millis).unwrap_or_else(|| Timestamp::new(SystemTime::now().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_clock_reads_what_this_process_reads_to_within_a_second() {
        let Some(kernel) = kernel_wall_clock_ms() else { return };
        let process = process_clock_ms();
        assert!((process - kernel).abs() < 1_500, "kernel {kernel} process {process}");
        assert_eq!(process_skew_ms(), None, "this test's clock is the kernel's");
    }

    #[test]
    fn a_clock_an_hour_off_is_named_and_one_within_the_kernels_second_is_not() {
        let kernel = 1_800_000_000_000;
        assert_eq!(skew(kernel + 3_600_500, kernel), Some(3_600_000));
        assert_eq!(skew(kernel - 3_599_500, kernel), Some(-3_600_000));
        assert_eq!(skew(kernel + 999, kernel), None);
        assert_eq!(skew(kernel, kernel), None);
    }
}
