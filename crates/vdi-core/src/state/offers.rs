//! What a member offers the person looking at it (Release…, Connect…), as the app's rows show
//! it: judged by the claim rules ([`crate::claim::offers`]) for the one identity a cluster link
//! acts as, so that the window never decides who may do what. Plain data here; the rules live
//! with the claims.

use serde::Serialize;

/// One action a row offers the viewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Offer {
    /// Whether the viewer may use it.
    pub allowed: bool,
    /// Why not, when not allowed: what is true and whom to ask, in plain words.
    pub reason: Option<String>,
    /// The question to ask first, if any (someone else's desktop: "dev-1 is alice's desktop.
    /// Connect anyway?").
    pub ask: Option<String>,
}

impl Offer {
    /// Allowed, nothing to ask.
    pub fn yes() -> Offer {
        Offer {
            allowed: true,
            reason: None,
            ask: None,
        }
    }

    /// Not allowed, for `reason`.
    pub fn no(reason: String) -> Offer {
        Offer {
            allowed: false,
            reason: Some(reason),
            ask: None,
        }
    }
}

/// What releasing a member means for the viewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ReleaseOffer {
    /// Someone else's live claim: a force release (an administrator's, recorded as an Event);
    /// without the guard it also takes the right to delete Leases in the namespace
    /// ([`crate::identity::Permissions::force_release`]).
    pub force: bool,
    /// Whether the viewer may release it, and why not.
    pub offer: Offer,
}

/// The actions a member's row offers the viewer; `None` where there is nothing of that kind
/// (no holder to release; a VM that does not run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct MemberOffers {
    /// Release… or Force release….
    pub release: Option<ReleaseOffer>,
    /// Connect….
    pub connect: Option<Offer>,
}

/// What "Get a desktop" offers the viewer of a pool (judged by [`crate::claim::offers::fill`]
/// with the rule a claim applies, [`crate::claim::ownership`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolOffer {
    /// Free members a claim of theirs may take: every free one, but in a dedicated pool only
    /// their own (if they own one) or the unowned ones.
    pub free: u32,
    /// In a dedicated pool, the member they own, if any: their desktop, which their claims
    /// return.
    pub yours: Option<String>,
}
