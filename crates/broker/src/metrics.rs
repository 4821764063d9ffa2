//! What the broker tells Prometheus (OpenMetrics text on `/metrics`, [`crate::serve`]), with the
//! names operators alert on:
//!
//! - `corral_vdi_reconcile_total{result}` (`ok`, `requeue`: asked to be looked at again at a
//!   time, `error`), `corral_vdi_reconcile_errors_total`,
//!   `corral_vdi_reconcile_duration_seconds` (histogram): each member's or pool's reconcile;
//! - `corral_vdi_workqueue_depth`, `corral_vdi_workqueue_queue_duration_seconds` (histogram: from
//!   the time a member was due to the time its reconcile started);
//! - `corral_vdi_pool_members{namespace,pool,state}`: per pool, members that are `free`
//!   (stopped), `warm` (free and running), `claimed`, `granting`, `releasing`, `removing`, and
//!   `unreadable` (a conflict or a claim that cannot be read: an administrator's to look at), as
//!   the views count them ([`vdi_core::state::StateCounts`]), at every full pass;
//! - `corral_vdi_claim_grant_seconds` (histogram): from a claim's Lease being written (its
//!   `acquireTime`, not before its `creationTimestamp`: the API server's clock for a new Lease)
//!   to the holder's grant bound;
//! - `corral_vdi_reclaims_total{why}` (`expired`, `invalid`: a Lease that never expires or lies
//!   about its time, `maxSession`, `idle`, `disconnected`, `unfit`: a claim that could never be
//!   granted, released at once);
//! - `corral_vdi_leader`: 1 while this replica holds the leader Lease, else 0.
//!
//! Standby replicas serve the same names (their leader gauge 0; a replica that stops leading
//! drops its pool census and queue depth, so that a sum over replicas counts the leader's).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use vdi_core::state::{PoolView, StateCounts};

/// `result` of a reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok`, `requeue` or `error`.
    pub result: &'static str,
}

/// One pool's members in one state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabels {
    /// The pool's namespace.
    pub namespace: String,
    /// The pool.
    pub pool: String,
    /// The state ([`census`]).
    pub state: &'static str,
}

/// Why a claim was reclaimed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhyLabel {
    /// `expired`, `invalid`, `maxSession`, `idle`, `disconnected`, `unfit`.
    pub why: &'static str,
}

/// The broker's metrics, registered once per process; cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    /// `corral_vdi_reconcile_total{result}`.
    pub reconciles: Family<ResultLabel, Counter>,
    /// `corral_vdi_reconcile_errors_total`.
    pub errors: Counter,
    /// `corral_vdi_reconcile_duration_seconds`.
    pub duration: Histogram,
    /// `corral_vdi_workqueue_depth`.
    pub depth: Gauge,
    /// `corral_vdi_workqueue_queue_duration_seconds`.
    pub queue_wait: Histogram,
    /// `corral_vdi_pool_members{namespace,pool,state}`.
    pub members: Family<MemberLabels, Gauge>,
    /// `corral_vdi_claim_grant_seconds`.
    pub grant: Histogram,
    /// `corral_vdi_reclaims_total{why}`.
    pub reclaims: Family<WhyLabel, Counter>,
    /// `corral_vdi_leader`.
    pub leader: Gauge,
}

/// Buckets from 1 ms to about 65 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("corral_vdi");
        let m = Metrics {
            reconciles: Family::default(),
            errors: Counter::default(),
            duration: seconds(),
            depth: Gauge::default(),
            queue_wait: seconds(),
            members: Family::default(),
            grant: seconds(),
            reclaims: Family::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconcile",
            "Reconciles of members and pools, by result",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed (retried)",
            m.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long one reconcile took, in seconds",
            m.duration.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Members and pools waiting in the work queue",
            m.depth.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long a due member or pool waited before its reconcile started, in seconds",
            m.queue_wait.clone(),
        );
        registry.register(
            "pool_members",
            "Members of each pool per state, at the last full pass",
            m.members.clone(),
        );
        registry.register(
            "claim_grant_seconds",
            "From a claim's Lease being written to its holder's grant bound, in seconds",
            m.grant.clone(),
        );
        registry.register("reclaims", "Claims reclaimed, by why", m.reclaims.clone());
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            m.leader.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The OpenMetrics text of every metric (ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Counts one reconcile that took `took` and ended with `result`.
    pub fn reconciled<T>(&self, took: std::time::Duration, result: &anyhow::Result<Option<T>>) {
        self.duration.observe(took.as_secs_f64());
        let result = match result {
            Ok(None) => "ok",
            Ok(Some(_)) => "requeue",
            Err(_) => {
                self.errors.inc();
                "error"
            }
        };
        self.reconciles.get_or_create(&ResultLabel { result }).inc();
    }

    /// Sets `corral_vdi_pool_members` to the pools' counts now (pools that are gone leave it).
    pub fn census(&self, pools: &[PoolView]) {
        self.members.clear();
        for pool in pools {
            for (state, count) in states(&pool.state_counts) {
                self.members
                    .get_or_create(&MemberLabels {
                        namespace: pool.namespace.clone(),
                        pool: pool.name.clone(),
                        state,
                    })
                    .set(i64::from(count));
            }
        }
    }
}

/// A pool's counts as `corral_vdi_pool_members` names them: free counts the stopped free
/// members (the running ones are warm).
fn states(c: &StateCounts) -> [(&'static str, u32); 7] {
    [
        ("free", c.free.saturating_sub(c.warm)),
        ("warm", c.warm),
        ("claimed", c.claimed),
        ("granting", c.granting),
        ("releasing", c.releasing),
        ("removing", c.removing),
        ("unreadable", c.problems),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_served_in_openmetrics_text() {
        let m = Metrics::default();
        m.reconciles
            .get_or_create(&ResultLabel { result: "ok" })
            .inc();
        m.errors.inc();
        m.duration.observe(0.02);
        m.depth.set(3);
        m.queue_wait.observe(0.001);
        m.grant.observe(0.4);
        m.reclaims.get_or_create(&WhyLabel { why: "expired" }).inc();
        m.leader.set(1);
        let text = m.encode();
        for line in [
            "corral_vdi_reconcile_total{result=\"ok\"} 1",
            "corral_vdi_reconcile_errors_total 1",
            "corral_vdi_reconcile_duration_seconds_count 1",
            "corral_vdi_workqueue_depth 3",
            "corral_vdi_workqueue_queue_duration_seconds_count 1",
            "corral_vdi_claim_grant_seconds_sum 0.4",
            "corral_vdi_reclaims_total{why=\"expired\"} 1",
            "corral_vdi_leader 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
