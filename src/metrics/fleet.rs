//! A fleet's gauges (`store: "postgres://…"`): what the whole fleet has waiting, its
//! leases, and this worker's store round trip; read from the store when scraped.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::pg::FleetStatus;

#[derive(Default)]
pub(super) struct Gauges {
    store_up: Gauge,
    store_round_trip: Gauge<f64, AtomicU64>,
    queued_tasks: Gauge,
    oldest_queued: Gauge<f64, AtomicU64>,
    leases: Gauge,
    leases_held: Gauge,
    lease_expiries: Gauge,
}

impl Gauges {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "store_up",
            "Fleet: whether this worker's last statement reached the store (1) or not (0)",
            self.store_up.clone(),
        );
        r.register(
            "store_round_trip_seconds",
            "Fleet: the last statement's round trip to the store",
            self.store_round_trip.clone(),
        );
        r.register(
            "fleet_queued_tasks",
            "Fleet: tasks with events waiting that no worker holds",
            self.queued_tasks.clone(),
        );
        r.register(
            "fleet_oldest_queued_seconds",
            "Fleet: how long the oldest event no worker holds has waited",
            self.oldest_queued.clone(),
        );
        r.register(
            "fleet_leases",
            "Fleet: live task leases across the fleet",
            self.leases.clone(),
        );
        r.register(
            "worker_leases",
            "Fleet: task leases this worker holds",
            self.leases_held.clone(),
        );
        r.register(
            "fleet_lease_expiries",
            "Fleet: leases that ran out before their worker let them go (ever)",
            self.lease_expiries.clone(),
        );
    }
}

/// The fleet as last seen: `status` when the store answered.
pub(crate) fn set_fleet(status: Option<&FleetStatus>, held: usize, round_trip: Option<f64>) {
    let g = &super::METRICS.fleet;
    g.store_up.set(i64::from(status.is_some()));
    g.leases_held.set(i64::try_from(held).unwrap_or(i64::MAX));
    if let Some(rt) = round_trip {
        g.store_round_trip.set(rt);
    }
    if let Some(s) = status {
        g.queued_tasks.set(s.queued_tasks);
        g.oldest_queued
            .set(s.oldest_queued.map(|d| d.as_secs_f64()).unwrap_or(0.0));
        g.leases.set(s.leases);
        g.lease_expiries.set(s.lease_expiries);
    }
}
