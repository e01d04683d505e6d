//! What cluster-wide IPAM counts, in every process (plugin processes
//! count too, unread): the daemon's `/metrics` serves them.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use plexus_ipam::whereabouts::allocate;
use plexus_ipam::whereabouts::conf::PoolRange;

/// What cluster-wide IPAM counts, in every process; the daemon's `/metrics`
/// serves them (`plexus_cluster_ipam_*`).
pub struct IpamMetrics {
    /// Addresses taken, by result (`ok`, `exhausted`, `failed`).
    pub(super) allocations: IntCounterVec,
    /// Pool writes that lost to another writer and were decided again.
    pub(super) conflicts: IntCounter,
    /// Addresses given back at DEL.
    pub(super) releases: IntCounter,
    /// Entries of live pods that another writer erased, written back by
    /// the reconciler (`reconcile::backups`).
    pub(super) restored: IntCounter,
    /// Addresses of pods that are gone, given back by the reconciler, by
    /// why (`pod-missing`, `pod-replaced`, `claim-deleted`).
    pub(super) reclaimed: IntCounterVec,
    /// Each pool's addresses, by state (`held` after this process's last
    /// write of it, `usable`).
    pub(super) pool_addresses: IntGaugeVec,
}

impl IpamMetrics {
    /// Serve them from `registry` (the daemon's).
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.allocations.clone()))?;
        registry.register(Box::new(self.conflicts.clone()))?;
        registry.register(Box::new(self.releases.clone()))?;
        registry.register(Box::new(self.restored.clone()))?;
        registry.register(Box::new(self.reclaimed.clone()))?;
        registry.register(Box::new(self.pool_addresses.clone()))
    }

    pub(super) fn held(&self, pool: &str, range: &PoolRange, held: usize) {
        let usable = i64::try_from(allocate::capacity(range)).unwrap_or(i64::MAX);
        let gauge = |state| self.pool_addresses.with_label_values(&[pool, state]);
        gauge("usable").set(usable);
        gauge("held").set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}

/// This process's [`IpamMetrics`].
pub fn metrics() -> &'static IpamMetrics {
    static METRICS: OnceLock<IpamMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let opts = |name: &str, help: &str| Opts::new(name, help);
        IpamMetrics {
            allocations: IntCounterVec::new(
                opts(
                    "cluster_ipam_allocations_total",
                    "Cluster-wide IPAM addresses taken, by result (ok, exhausted, failed).",
                ),
                &["result"],
            )
            .expect("valid metric"),
            conflicts: IntCounter::with_opts(opts(
                "cluster_ipam_write_conflicts_total",
                "IPPool writes that lost to another writer (409) and were decided again.",
            ))
            .expect("valid metric"),
            releases: IntCounter::with_opts(opts(
                "cluster_ipam_releases_total",
                "Cluster-wide IPAM addresses given back at DEL.",
            ))
            .expect("valid metric"),
            restored: IntCounter::with_opts(opts(
                "cluster_ipam_entries_restored_total",
                "IPPool entries of live pods that another writer erased (offsets whereabouts \
                 cannot read), written back by the reconciler.",
            ))
            .expect("valid metric"),
            reclaimed: IntCounterVec::new(
                opts(
                    "cluster_ipam_reclaimed_total",
                    "Cluster-wide IPAM addresses of pods that are gone, given back by the \
                     reconciler, by why (pod-missing, pod-replaced, claim-deleted).",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            pool_addresses: IntGaugeVec::new(
                opts(
                    "cluster_ipam_pool_addresses",
                    "Addresses of each IPPool, by state (held after the last write, usable).",
                ),
                &["pool", "state"],
            )
            .expect("valid metric"),
        }
    })
}
