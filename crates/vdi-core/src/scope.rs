//! Which namespaces a view or a request covers: one, or all the identity may list. A bottom
//! module, importing nothing of the crate; its check is [`crate::validate::scope`].

use serde::{Deserialize, Serialize};

/// Which namespaces a view covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind", content = "namespace")]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// Every namespace the identity may list.
    All,
}

impl Scope {
    /// The namespace, or `None` for all namespaces.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Namespace(ns) => Some(ns),
            Scope::All => None,
        }
    }
}
