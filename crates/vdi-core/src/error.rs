//! One typed error for every vdi-core operation, with a kind, a fix and a retryable flag, so
//! the CLI prints it and the app shows it without parsing text.
//!
//! The bottom floor of the crate: it imports no other module of it but [`crate::names`]'s
//! names, so every feature can use it and editing it touches none of them. The views an error is
//! shown as ([`ErrorKind`], [`ErrorView`]) and the plain payloads two of its variants carry
//! ([`StreamRefusal`], [`PoolCreateFailure`]) live here too; their wording is written by their
//! feature: `StreamRefusal::explain` in [`crate::stream`], [`PoolCreateFailure`]'s message and
//! fix in `pool/failure.rs`.

use serde::Serialize;

/// Result of a vdi-core operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A vdi-core failure. Its `Display` is one sentence naming the object; [`Error::suggestion`]
/// says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input was refused before anything was sent to the cluster.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// How to fix it.
        suggestion: Option<String>,
    },
    /// The kubeconfig could not be read, or has no such context.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// A request to the API server failed; `action` names what was being done to which object.
    #[error("{action}: {}", describe(source))]
    Kube {
        /// What was being done, e.g. `list VirtualMachines in namespace "corral-vms"`.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },

    // --- claims (claim.rs) ---
    /// A claim rule said no: no free member, or someone else holds the Lease. Nothing changed.
    #[error("{message}")]
    Refused {
        /// Which rule, naming the member or pool and the holder.
        message: String,
        /// What the user can do.
        suggestion: Option<String>,
    },
    /// A claim or release got part of the way: `message` says exactly what state was left
    /// (always one SPEC allows) and `source` why the rest failed.
    #[error("{message}: {source}")]
    Partial {
        /// What was done and what state was left.
        message: String,
        /// How to finish or back out.
        suggestion: String,
        /// The failure.
        #[source]
        source: Box<Error>,
    },

    /// Refused because of what is on the cluster or who asks (a missing golden VM, a name
    /// already taken, assigned members, a `--user` that is not you, a refused impersonation),
    /// before anything changed.
    #[error("{message}")]
    Rejected {
        /// Which kind of refusal: `NotFound`, `Invalid`, `Conflict`, `Forbidden`, ….
        kind: ErrorKind,
        /// One sentence naming the object and the cause.
        message: String,
        /// The fix.
        suggestion: String,
    },
    /// The API server stopped answering while the connections to it stayed open (a wedged or
    /// stopped server): no answer to the heartbeat within its timeout. Not a refusal: it is
    /// asked again on its own, so it is retryable (kind `Timeout`).
    #[error("the API server has not answered for {seconds} s: the pools shown may be out of date")]
    Silent {
        /// How long it had been asked without an answer (seconds).
        seconds: u64,
    },
    /// The live view's task ended, which it never should (a defect: a panic, or its watches
    /// ended): nothing updates the view any more. Kind `Other`, not retryable by waiting.
    #[error("the live view stopped: {why}; the pools shown are no longer updated")]
    FeedStopped {
        /// What ended it (a panic's message).
        why: String,
    },
    /// virt-api (or the API server in front of it) refused to open a stream (VNC, port
    /// forward, USB redirection), before the upgrade.
    #[error("{0}")]
    Stream(Box<StreamRefusal>),
    /// A pool create that finished for some members only; says exactly which members exist and
    /// what (if anything) was left behind.
    #[error("{0}")]
    PoolIncomplete(Box<PoolCreateFailure>),
    /// libusb could not start, or could not list this machine's USB devices (no USB bus, no
    /// access to `/dev/bus/usb`), so none can be listed or redirected (`crate::usb`).
    #[cfg(feature = "desktop")]
    #[error("libusb could not {action} on this machine: {source}")]
    Usb {
        /// What libusb was asked to do: `start`, `list the USB devices`.
        action: &'static str,
        /// libusb's error.
        #[source]
        source: rusb::Error,
    },
}

impl Error {
    /// Wraps a kube-rs error with the action that failed.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            action: action.into(),
            source,
        }
    }

    /// A refusal of kind `kind` because of what is on the cluster or who asks, with a fix.
    pub fn rejected(
        kind: ErrorKind,
        message: impl Into<String>,
        suggestion: impl Into<String>,
    ) -> Self {
        Error::Rejected {
            kind,
            message: message.into(),
            suggestion: suggestion.into(),
        }
    }

    /// An input refusal with a fix.
    pub fn invalid(message: impl Into<String>, suggestion: impl Into<String>) -> Self {
        Error::Invalid {
            message: message.into(),
            suggestion: Some(suggestion.into()),
        }
    }

    /// This error, or, when it is the API server's RBAC refusal (a 403 that is not the
    /// guard's), a refusal saying that `what` ("change a pool's settings") is for Corral VDI
    /// administrators (the [`crate::names::ADMIN_GROUP`] group), with the request refused and
    /// the fix: ask one of them. Nothing else changes.
    pub fn for_admins(self, what: &str) -> Self {
        let admins = crate::names::ADMIN_GROUP;
        self.rbac_refusal(
            &format!("only Corral VDI administrators (group {admins}) {what}"),
            &format!("ask a member of {admins} to do it, or to add you to the group"),
        )
    }

    /// [`Error::for_admins`] for what only a cluster administrator does (`what`: "install or
    /// remove the guard"): cluster-wide objects, which no namespace's rights cover.
    pub fn for_cluster_admins(self, what: &str) -> Self {
        self.rbac_refusal(
            &format!("only a cluster administrator may {what} (cluster-wide objects)"),
            "ask a cluster administrator to run it; nothing here depends on the namespace",
        )
    }

    /// This error, or, for an RBAC 403 (not the guard's), a `Forbidden` refusal naming the
    /// request, `who_may` and `fix`.
    fn rbac_refusal(self, who_may: &str, fix: &str) -> Self {
        match self {
            Error::Kube { action, source }
                if is_status(&source, 403) && !is_guard_denial(&source) =>
            {
                Error::rejected(
                    ErrorKind::Forbidden,
                    format!(
                        "{action} was refused: {who_may}, and RBAC does not let you; nothing \
                         was changed"
                    ),
                    fix,
                )
            }
            other => other,
        }
    }

    /// The HTTP status the API server answered with, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid { .. } => ErrorKind::Invalid,
            Error::Refused { .. } => ErrorKind::Refused,
            Error::Partial { .. } => ErrorKind::Partial,
            Error::Config(_) => ErrorKind::Config,
            Error::Kube { source, .. } => kube_kind(source),
            Error::Rejected { kind, .. } => *kind,
            Error::Silent { .. } => ErrorKind::Timeout,
            Error::FeedStopped { .. } => ErrorKind::Other,
            Error::Stream(refusal) => refusal.kind(),
            Error::PoolIncomplete(failure) => failure.kind(),
            #[cfg(feature = "desktop")]
            Error::Usb { .. } => ErrorKind::Other,
        }
    }

    /// What the user can do about it. A denial by the server-side guard ([`crate::guard`])
    /// points at who may do it, not at RBAC, which allowed it.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            Error::Invalid { suggestion, .. } | Error::Refused { suggestion, .. } => {
                suggestion.clone()
            }
            Error::Partial { suggestion, .. } => Some(suggestion.clone()),
            Error::Rejected { suggestion, .. } => Some(suggestion.clone()),
            Error::Silent { .. } => Some(
                "it is asked again every few seconds and the view catches up by itself when it \
                 answers; if it stays silent, check the cluster (kubectl get --raw /readyz)"
                    .into(),
            ),
            Error::FeedStopped { .. } => Some(
                "switch the context or namespace (or restart the app) to start it again, and \
                 report this with the log: it is a defect"
                    .into(),
            ),
            Error::Stream(refusal) => Some(refusal.suggestion.clone()),
            Error::PoolIncomplete(failure) => Some(failure.suggestion()),
            #[cfg(feature = "desktop")]
            Error::Usb { .. } => Some(
                "check that this machine has a USB bus that you may read (/dev/bus/usb; lsusb \
                 lists its devices); in a container or a VM, pass the host's USB bus through"
                    .into(),
            ),
            Error::Config(_) => Some(
                "check KUBECONFIG or --kubeconfig, and the context name (kubectl config get-contexts)"
                    .into(),
            ),
            Error::Kube { source, .. } if is_guard_denial(source) => Some(format!(
                "the cluster's corral-vdi guard refused it (RBAC allowed it; the claim rules \
                 do not): ask the person it names, or a member of {} to do it",
                crate::names::ADMIN_GROUP
            )),
            Error::Kube { .. } => match self.kind() {
                ErrorKind::Unreachable => Some(
                    "check that the cluster is running and that the kubeconfig's server address is right"
                        .into(),
                ),
                ErrorKind::Unauthorized => Some(
                    "the credentials were refused: log in again or pick another context".into(),
                ),
                ErrorKind::Forbidden => Some(
                    "ask a cluster administrator for RBAC access, or pick a namespace you may use"
                        .into(),
                ),
                ErrorKind::NotFound => {
                    Some("check the name and the namespace (-n); KubeVirt must be installed".into())
                }
                ErrorKind::Conflict => Some("someone else changed it first: try again".into()),
                _ => None,
            },
        }
    }

    /// Whether trying again unchanged may work.
    pub fn retryable(&self) -> bool {
        if matches!(self, Error::Rejected { .. } | Error::Stream(_)) {
            // A refusal stands until someone changes the cluster: retrying alone never helps
            // (and a stream's 503 means someone is viewing, not "try again").
            return false;
        }
        matches!(
            self.kind(),
            ErrorKind::Unreachable | ErrorKind::Conflict | ErrorKind::Timeout
        )
    }

    /// The error as the UI shows it.
    pub fn view(&self) -> ErrorView {
        ErrorView {
            kind: self.kind(),
            message: self.to_string(),
            suggestion: self.suggestion(),
            retryable: self.retryable(),
        }
    }
}

/// Whether the API server answered `err` with HTTP status `code` (409 Conflict/AlreadyExists,
/// 404 NotFound, …).
pub(crate) fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// Whether the API server refused `err` because the server-side guard's policies denied it (a
/// 403 whose message starts with [`crate::names::DENIAL_PREFIX`]; [`crate::guard`] installs
/// them), rather than RBAC.
pub fn is_guard_denial(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 403 && s.message.contains(crate::names::DENIAL_PREFIX))
}

/// The API server's own message for API errors (not the client's debug dump), else the error
/// with its causes.
pub(crate) fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        kube::Error::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        other => {
            // The whole chain: "client error (Connect): tcp connect error: Connection refused".
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text = format!("{text}: {cause_text}");
                }
                source = cause.source();
            }
            text
        }
    }
}

fn kube_kind(err: &kube::Error) -> ErrorKind {
    match err {
        kube::Error::Api(status) => match status.code {
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            404 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            422 | 400 => ErrorKind::Invalid,
            504 => ErrorKind::Timeout,
            502 | 503 => ErrorKind::Unreachable,
            _ => ErrorKind::Other,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => ErrorKind::Unreachable,
        kube::Error::Auth(_) => ErrorKind::Unauthorized,
        kube::Error::InferConfig(_)
        | kube::Error::InferKubeconfig(_)
        | kube::Error::TlsRequired => ErrorKind::Config,
        _ => ErrorKind::Other,
    }
}

impl From<&Error> for ErrorView {
    fn from(err: &Error) -> Self {
        err.view()
    }
}

/// So that a front end's command returns the core's errors with `?`: one conversion, written
/// once.
impl From<Error> for ErrorView {
    fn from(err: Error) -> Self {
        err.view()
    }
}

/// Kinds of failure, so that callers can react without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The input was refused before anything was sent.
    Invalid,
    /// The kubeconfig could not be read or used.
    Config,
    /// The API server could not be reached.
    Unreachable,
    /// The credentials were refused (401).
    Unauthorized,
    /// RBAC denied the request (403).
    Forbidden,
    /// The object does not exist (404).
    NotFound,
    /// Another writer won (409).
    Conflict,
    /// A wait ran out.
    Timeout,
    /// A claim rule said no (no free member; another holder).
    Refused,
    /// Someone else is using it right now (a VNC console being viewed): the caller may offer
    /// to take over.
    Busy,
    /// Part of an operation succeeded; the message says what state was left.
    Partial,
    /// Anything else.
    Other,
}

/// An error as the UI shows it: what happened, naming the object, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ErrorView {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// One sentence naming the object.
    pub message: String,
    /// What to do about it, if known.
    pub suggestion: Option<String>,
    /// Whether trying again unchanged may work.
    pub retryable: bool,
}

/// Why one member of a pool create failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct MemberFailure {
    /// The member that does not exist.
    pub member: String,
    /// What went wrong, naming the clone object, its phase and condition message.
    pub message: String,
    /// Whether it ran out of time (rather than failing outright).
    pub timed_out: bool,
}

/// A pool create that did not finish for every member: exactly what exists afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolCreateFailure {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// Members asked for.
    pub requested: u32,
    /// Members that exist, labelled, stopped and unassigned, in index order.
    pub created: Vec<String>,
    /// Members that do not exist, with the reason.
    pub failed: Vec<MemberFailure>,
    /// Objects this run made that it could not remove (each with the command that does), e.g.
    /// an unlabelled VM whose label patch and delete were both refused. Empty when the run left
    /// nothing behind but `created`.
    pub leftovers: Vec<String>,
}

/// Why virt-api (or the API server in front of it) refused to open a stream: the HTTP status,
/// the server's own `Status` message, and what it means for this member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct StreamRefusal {
    /// The member (VMI) the stream was for.
    pub member: String,
    /// `vnc`, `portforward` or `usbredir`.
    pub subresource: String,
    /// The HTTP status of the refusal (404, 400, 409, 500, 503, 504, 403, …).
    pub status: u16,
    /// The server's own message (the `Status` body), as it said it.
    pub server_message: String,
    /// One sentence naming the member and the cause.
    pub message: String,
    /// The fix.
    pub suggestion: String,
    /// Whether the refusal means someone else is viewing the console (VNC with
    /// `preserveSession`): the caller can offer to take over.
    pub busy: bool,
}

impl StreamRefusal {
    /// The error kind the refusal maps to.
    pub fn kind(&self) -> ErrorKind {
        match self.status {
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            404 => ErrorKind::NotFound,
            400 => ErrorKind::Invalid,
            409 => ErrorKind::Conflict,
            503 if self.busy => ErrorKind::Busy,
            504 => ErrorKind::Timeout,
            _ => ErrorKind::Other,
        }
    }
}

impl std::fmt::Display for StreamRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
