//! How a pool create that finished for some members only is told: [`PoolCreateFailure`]'s
//! kind, message and fix.

use std::fmt;

use crate::error::{ErrorKind, PoolCreateFailure};

impl PoolCreateFailure {
    /// `Timeout` when a member ran out of time, else `Other`.
    pub fn kind(&self) -> ErrorKind {
        if self.failed.iter().any(|f| f.timed_out) {
            ErrorKind::Timeout
        } else {
            ErrorKind::Other
        }
    }

    /// How to clean up or carry on.
    pub fn suggestion(&self) -> String {
        let delete = format!("corral-vdi pool delete {} -n {}", self.pool, self.namespace);
        let mut text = if self.created.is_empty() && self.leftovers.is_empty() {
            "nothing was left behind: fix the cause above and run the same create again".to_owned()
        } else if self.created.is_empty() {
            format!(
                "remove what was left behind (listed above, or with `{delete}`), fix the cause and create again"
            )
        } else {
            format!(
                "the {} member(s) that exist form a usable pool; to start over, remove them with \
                 `{delete}`, fix the cause and create the pool again",
                self.created.len()
            )
        };
        if self.failed.iter().any(|f| f.timed_out) {
            text.push_str(&format!(
                "; a longer --timeout helps if the clones were only slow (kubectl get \
                 virtualmachineclone -n {} shows their phases)",
                self.namespace
            ));
        }
        text
    }
}

impl fmt::Display for PoolCreateFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pool, ns) = (&self.pool, &self.namespace);
        if self.created.is_empty() {
            write!(
                f,
                "pool \"{pool}\" in namespace \"{ns}\" was not created: no member was made"
            )?;
        } else {
            write!(
                f,
                "pool \"{pool}\" in namespace \"{ns}\" is incomplete: {} of {} members exist ({})",
                self.created.len(),
                self.requested,
                self.created.join(", ")
            )?;
        }
        for failure in &self.failed {
            write!(f, "; member \"{}\": {}", failure.member, failure.message)?;
        }
        if !self.leftovers.is_empty() {
            write!(f, "; left behind: {}", self.leftovers.join("; "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::error::MemberFailure;

    #[test]
    fn a_partial_failure_says_which_members_exist() {
        let failure = PoolCreateFailure {
            namespace: "ns".into(),
            pool: "p".into(),
            requested: 3,
            created: vec!["p-1".into(), "p-3".into()],
            failed: vec![MemberFailure {
                member: "p-2".into(),
                message: "timed out".into(),
                timed_out: true,
            }],
            leftovers: Vec::new(),
        };
        let text = failure.to_string();
        assert!(text.contains("2 of 3 members exist (p-1, p-3)"), "{text}");
        assert!(text.contains("member \"p-2\": timed out"), "{text}");
        assert_eq!(failure.kind(), ErrorKind::Timeout);
        assert!(
            failure
                .suggestion()
                .contains("corral-vdi pool delete p -n ns")
        );
        let err = Error::PoolIncomplete(Box::new(failure));
        assert_eq!(err.kind(), ErrorKind::Timeout);
    }
}
