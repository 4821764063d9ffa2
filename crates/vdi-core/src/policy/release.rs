//! What a release does to a member, said before it happens: one rule, read by the member views
//! (the app's Release dialog and row, the CLI's `unassign` line) and the same as the broker's
//! acts ([`super::plan`]: a member above the pool's size is removed once released, the others
//! get `onRelease`).

use serde::Serialize;

use super::plan::index_of;
use super::{OnRelease, Policy};

/// What releasing a member does to its VM (SPEC "Pool policy and lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ReleaseEffect {
    /// Stopped, its disk kept (`onRelease: keep`, and every unmanaged pool); with `warm`, the
    /// broker restarts it instead when the pool's warm buffer wants it running
    /// ([`super::plan::stays_warm`]).
    Stop {
        /// The pool keeps warm members (free members running for the next claim).
        warm: bool,
    },
    /// Restarted, its disk kept (`onRelease: restart`).
    Restart,
    /// Deleted with its disk and cloned again from the golden VM (`onRelease: reset`).
    Reset,
    /// Deleted with its disk and not replaced: the pool was made smaller than its index.
    Remove {
        /// The pool's size now, in members.
        size: u32,
    },
}

impl ReleaseEffect {
    /// What a release of this member does (`policy`: its pool's, `None` for an unmanaged pool
    /// or one whose policy cannot be read, which the broker leaves as it is).
    pub fn of(policy: Option<&Policy>, pool: &str, member: &str) -> ReleaseEffect {
        if let Some(policy) = policy
            && index_of(pool, member).is_some_and(|i| i > policy.size)
        {
            return ReleaseEffect::Remove { size: policy.size };
        }
        match on_release(policy) {
            OnRelease::Keep => ReleaseEffect::Stop {
                warm: policy.is_some_and(|p| p.warm > 0),
            },
            OnRelease::Restart => ReleaseEffect::Restart,
            OnRelease::Reset => ReleaseEffect::Reset,
        }
    }

    /// The effect in words, a clause that follows "On release, " or a member's name ("its VM
    /// is stopped; its disk is kept for the next user").
    pub fn words(&self) -> String {
        match self {
            ReleaseEffect::Stop { warm: false } => {
                "its VM is stopped; its disk is kept for the next user".into()
            }
            ReleaseEffect::Stop { warm: true } => "its VM is stopped, or restarted when the pool \
                 wants it as one of its warm members (either way every open session ends); its \
                 disk is kept for the next user"
                .into(),
            ReleaseEffect::Restart => {
                "its VM is restarted (every open session ends); its disk is kept".into()
            }
            ReleaseEffect::Reset => "its VM and its disk are deleted, and a fresh copy of the \
                 golden VM replaces it"
                .into(),
            ReleaseEffect::Remove { size } => format!(
                "its VM and its disk are deleted and not replaced: the pool was made smaller \
                 ({size} member{}), so this member goes when it is released",
                if *size == 1 { "" } else { "s" }
            ),
        }
    }
}

/// What a claim's end does to a member of a pool with `policy`: its `onRelease`, and `Keep` (the
/// VM stopped, its disk kept) for an unmanaged pool or one whose policy cannot be read. The
/// broker acts by it and [`ReleaseEffect::of`] says it.
pub fn on_release(policy: Option<&Policy>) -> OnRelease {
    policy.map_or(OnRelease::Keep, |p| p.on_release)
}

/// A [`ReleaseEffect`] with its words ([`ReleaseEffect::words`]), as the views carry it, so that
/// every front end says the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ReleaseView {
    /// What happens.
    pub effect: ReleaseEffect,
    /// It in words: a clause ("its VM is stopped; its disk is kept for the next user").
    pub words: String,
}

impl From<ReleaseEffect> for ReleaseView {
    fn from(effect: ReleaseEffect) -> Self {
        ReleaseView {
            effect,
            words: effect.words(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DesktopPoolSpec;

    fn policy(size: i32, warm: i32, on_release: OnRelease) -> Policy {
        DesktopPoolSpec {
            golden: "g".into(),
            size,
            warm: Some(warm),
            on_release: Some(on_release),
            ..Default::default()
        }
        .policy()
        .unwrap()
    }

    #[test]
    fn a_member_above_the_size_is_removed_whatever_on_release_says() {
        for on_release in [OnRelease::Keep, OnRelease::Restart, OnRelease::Reset] {
            let p = policy(2, 0, on_release);
            assert_eq!(
                ReleaseEffect::of(Some(&p), "dev", "dev-3"),
                ReleaseEffect::Remove { size: 2 }
            );
            assert_ne!(
                ReleaseEffect::of(Some(&p), "dev", "dev-2"),
                ReleaseEffect::Remove { size: 2 }
            );
        }
        assert!(
            ReleaseEffect::Remove { size: 2 }
                .words()
                .contains("made smaller (2 members)")
        );
    }

    #[test]
    fn within_the_size_on_release_decides_and_an_unmanaged_pool_stops() {
        let of = |p: &Policy| ReleaseEffect::of(Some(p), "dev", "dev-1");
        assert_eq!(
            of(&policy(2, 1, OnRelease::Keep)),
            ReleaseEffect::Stop { warm: true }
        );
        assert_eq!(
            of(&policy(2, 1, OnRelease::Restart)),
            ReleaseEffect::Restart
        );
        assert_eq!(of(&policy(2, 0, OnRelease::Reset)), ReleaseEffect::Reset);
        assert_eq!(
            ReleaseEffect::of(None, "dev", "dev-9"),
            ReleaseEffect::Stop { warm: false }
        );
        // A VM whose name is no member name of the pool is never "above the size".
        assert_eq!(
            ReleaseEffect::of(Some(&policy(1, 0, OnRelease::Keep)), "dev", "other-7"),
            ReleaseEffect::Stop { warm: false }
        );
        assert!(ReleaseEffect::Reset.words().contains("fresh copy"));
    }
}
