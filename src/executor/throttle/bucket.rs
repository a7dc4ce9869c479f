//! A token bucket in reservation form, on time given by the caller (the
//! daemon's clock): a request takes its bytes at once, the balance may go
//! below zero, and the request is granted when the balance is back to zero.
//! Reserving up front serves requests in arrival order and needs no queue.
//! (Not `governor`: its GCRA refuses a request larger than the burst instead
//! of queueing it, and its waits read ambient time; this is a few lines on
//! the daemon's own clock.)
//!
//! Invariant: bytes granted by time `t` (a request counts as granted once
//! its wait has passed) are at most `burst + rate × t`, `t` counted from the
//! bucket's creation, whatever the requests' sizes and times.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Bucket {
    /// Bytes per second.
    rate: f64,
    burst: f64,
    /// The balance at `at`; below zero while reservations wait.
    tokens: f64,
    at: Duration,
}

impl Bucket {
    /// A full bucket: `rate` bytes per second (at least 1), at most `burst`
    /// bytes at once after an idle spell.
    pub fn new(rate: u64, burst: u64, now: Duration) -> Bucket {
        Bucket { rate: rate.max(1) as f64, burst: burst as f64, tokens: burst as f64, at: now }
    }

    /// The default burst of a limit: a tenth of a second of it, at least one
    /// chunk (so that one request never waits on an idle node).
    pub fn burst_for(rate: u64) -> u64 {
        (rate / 10).max(super::CHUNK)
    }

    /// Reserves `bytes` at `now`; returns how long to wait before using them.
    pub fn reserve(&mut self, now: Duration, bytes: u64) -> Duration {
        // A clock that stepped back refills nothing and debits as usual.
        if now > self.at {
            let refill = (now - self.at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.at = now;
        }
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate) + self.at.saturating_sub(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_full_bucket_grants_its_burst_at_once_then_the_rate() {
        let mut b = Bucket::new(4 * MIB, MIB, Duration::ZERO);
        assert_eq!(b.reserve(Duration::ZERO, MIB), Duration::ZERO);
        assert_eq!(b.reserve(Duration::ZERO, MIB), Duration::from_millis(250));
        assert_eq!(b.reserve(Duration::ZERO, MIB), Duration::from_millis(500));
        // After the waits passed and an idle second, one burst again, no more.
        let later = Duration::from_millis(1500);
        assert_eq!(b.reserve(later, MIB), Duration::ZERO);
        assert_eq!(b.reserve(later, MIB / 2), Duration::from_millis(125));
    }

    /// The invariant, over many uneven requests at uneven times: by every
    /// grant time, no more than burst + rate × t was granted.
    #[test]
    fn grants_never_pass_burst_plus_rate_times_elapsed() {
        let (rate, burst) = (3 * MIB, MIB);
        let mut b = Bucket::new(rate, burst, Duration::ZERO);
        let mut grants = vec![];
        let mut now = Duration::ZERO;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bytes = 1 + x % MIB;
            now += Duration::from_micros(x % 200_000);
            grants.push((now + b.reserve(now, bytes), bytes));
        }
        grants.sort();
        let mut total = 0u64;
        for (at, bytes) in grants {
            total += bytes;
            let allowed = burst as f64 + rate as f64 * at.as_secs_f64();
            assert!(total as f64 <= allowed + 1.0, "{total} granted by {at:?}, {allowed} allowed");
        }
    }

    #[test]
    fn default_burst_is_a_tenth_of_a_second_and_at_least_a_chunk() {
        assert_eq!(Bucket::burst_for(200 * MIB), 20 * MIB);
        assert_eq!(Bucket::burst_for(4 * MIB), MIB);
    }
}
