//! Who does the cluster's half of a claim here — the cluster's broker or this client — and the
//! words both front ends show for it, written once: the CLI's notice on stderr and the app's
//! badge beside the guard's say the same.
//!
//! A broker that is installed ([`BrokerStatus::installed`]: running, or without a leader for
//! now) does that half ([`ClaimSide::Broker`]); otherwise — none on the cluster, or none this
//! identity may see (the broker's manifest lets every signed-in user read its Lease, so a
//! refusal means it is not installed or its Role is missing) — the client does, and anyone who
//! may claim in a namespace holds KubeVirt's console, forward, USB and power rights for every
//! desktop there (SPEC "Broker").

use serde::Serialize;

use crate::broker::{BrokerState, BrokerStatus};
use crate::state::ClaimSide;

/// What the client-side flow means, as the CLI (on stderr) and the app (the badge's detail)
/// say it, word for word.
pub const NO_BROKER_NOTICE: &str =
    "no broker on this cluster: anyone who may claim here can open any desktop's console";

/// Who does the cluster's half of a claim, from the broker's status (`None`: it could not be
/// read at all).
pub fn side(status: Option<&BrokerStatus>) -> ClaimSide {
    if status.is_some_and(BrokerStatus::installed) {
        ClaimSide::Broker
    } else {
        ClaimSide::Client
    }
}

/// The broker as the app's header shows it (a badge beside the guard's) and the CLI's notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct BrokerBadge {
    /// The broker's status as read; `None` when the cluster did not answer.
    pub status: Option<BrokerStatus>,
    /// The badge: "broker: <leader>" (one leads), "broker: grants nothing" (one leads but the
    /// cluster does not enforce the claim rules, [`BrokerStatus::refusing`]), "broker: no
    /// leader" (installed, none leads), "no broker" (the client-side flow applies).
    pub text: String,
    /// Its detail: [`NO_BROKER_NOTICE`] (then the status's own summary, when it says more,
    /// e.g. why the Lease could not be read), else the status's summary.
    pub detail: String,
    /// [`NO_BROKER_NOTICE`] when the client-side flow applies here, else `None`: the notice the
    /// CLI prints once on stderr for assign, connect and pool list.
    pub notice: Option<String>,
    /// Whether the broker does the cluster's half of claims here ([`side`] is
    /// [`ClaimSide::Broker`]): then a new pool is managed ([`crate::managed::create`]).
    pub brokered: bool,
}

/// The badge and notice for `status` (`None`: it could not be read).
pub fn broker_badge(status: Option<BrokerStatus>) -> BrokerBadge {
    let (text, detail, notice) = match &status {
        Some(s) if s.state == BrokerState::Running && s.refusing.is_some() => {
            ("broker: grants nothing".to_owned(), s.summary.clone(), None)
        }
        Some(s) if s.state == BrokerState::Running => (
            format!("broker: {}", s.leader.as_deref().unwrap_or("unnamed")),
            s.summary.clone(),
            None,
        ),
        Some(s) if s.installed() => ("broker: no leader".to_owned(), s.summary.clone(), None),
        absent => {
            let detail = match absent {
                Some(s) if s.state == BrokerState::Unknown => {
                    format!("{NO_BROKER_NOTICE}. {}", s.summary)
                }
                _ => NO_BROKER_NOTICE.to_owned(),
            };
            (
                "no broker".to_owned(),
                detail,
                Some(NO_BROKER_NOTICE.to_owned()),
            )
        }
    };
    BrokerBadge {
        brokered: side(status.as_ref()) == ClaimSide::Broker,
        status,
        text,
        detail,
        notice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: BrokerState, leader: Option<&str>) -> BrokerStatus {
        BrokerStatus {
            state,
            leader: leader.map(str::to_owned),
            replicas: Vec::new(),
            refusing: None,
            last_reconcile: None,
            summary: format!("summary of {state:?}"),
        }
    }

    #[test]
    fn a_broker_that_refuses_claims_says_so_on_the_badge() {
        let mut refusing = status(BrokerState::Running, Some("broker-a"));
        refusing.refusing = Some("the guard is not installed".into());
        let badge = broker_badge(Some(refusing));
        assert_eq!(badge.text, "broker: grants nothing");
        assert_eq!(badge.notice, None);
    }

    #[test]
    fn the_badge_names_the_leader_or_says_what_no_broker_means() {
        let running = broker_badge(Some(status(BrokerState::Running, Some("broker-a"))));
        assert_eq!(running.text, "broker: broker-a");
        assert_eq!(running.detail, "summary of Running");
        assert_eq!(running.notice, None);
        let no_leader = broker_badge(Some(status(BrokerState::NoLeader, None)));
        assert_eq!(no_leader.text, "broker: no leader");
        assert_eq!(no_leader.notice, None);
        for absent in [
            None,
            Some(status(BrokerState::Absent, None)),
            Some(status(BrokerState::Unknown, None)),
        ] {
            let unknown = absent
                .as_ref()
                .is_some_and(|s| s.state == BrokerState::Unknown);
            let badge = broker_badge(absent);
            assert_eq!(badge.text, "no broker");
            assert_eq!(badge.notice.as_deref(), Some(NO_BROKER_NOTICE));
            assert!(
                badge.detail.starts_with(NO_BROKER_NOTICE),
                "{}",
                badge.detail
            );
            assert_eq!(badge.detail.contains("summary of Unknown"), unknown);
        }
        assert_eq!(
            NO_BROKER_NOTICE,
            "no broker on this cluster: anyone who may claim here can open any desktop's console"
        );
    }

    #[test]
    fn an_installed_broker_does_the_clusters_half() {
        let on = |state| side(Some(&status(state, None)));
        assert_eq!(on(BrokerState::Running), ClaimSide::Broker);
        assert_eq!(on(BrokerState::NoLeader), ClaimSide::Broker);
        assert_eq!(on(BrokerState::Absent), ClaimSide::Client);
        assert_eq!(on(BrokerState::Unknown), ClaimSide::Client);
        assert_eq!(side(None), ClaimSide::Client);
    }
}
