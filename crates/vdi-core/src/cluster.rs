//! Connecting to a cluster: kubeconfig and contexts, clients (acting as the kubeconfig's user,
//! or impersonating another through the cluster's own impersonation) and the API server's
//! clock. Who a client is comes from [`crate::identity`].

use std::path::PathBuf;

use jiff::{SignedDuration, Timestamp};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{Error, Result};
use crate::model::{ContextInfo, Contexts};

/// Acting as someone else through the cluster's impersonation (`Impersonate-User` and
/// `Impersonate-Group` headers, like kubectl's `--as` and `--as-group`). The API server checks
/// RBAC's `impersonate` verb for each; a refusal names the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonation {
    /// The user to act as.
    pub user: String,
    /// Groups to act with (empty: the API server's defaults for an impersonated user).
    pub groups: Vec<String>,
}

/// Where the kubeconfig comes from: like kubectl, an explicit path beats the `KUBECONFIG` list,
/// which beats `~/.kube/config`; and whom to act as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeconfigSource {
    /// `--kubeconfig PATH`, if given.
    pub path: Option<PathBuf>,
    /// `--as USER [--as-group G]…`, if given.
    pub impersonate: Option<Impersonation>,
}

impl KubeconfigSource {
    /// Reads and merges the kubeconfig (the `KUBECONFIG` list is merged by kubectl's rules).
    ///
    /// Errors: [`Error::Config`] naming the file when it is missing or malformed.
    pub fn read(&self) -> Result<Kubeconfig> {
        match &self.path {
            Some(path) => Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(format!(
                    "cannot read the kubeconfig {}: {e}",
                    path.display()
                ))
            }),
            None => Kubeconfig::read().map_err(|e| Error::Config(e.to_string())),
        }
    }

    /// The files that make up the kubeconfig, for display.
    pub fn paths(&self) -> Vec<PathBuf> {
        if let Some(path) = &self.path {
            return vec![path.clone()];
        }
        if let Some(list) = std::env::var_os("KUBECONFIG") {
            let paths: Vec<_> = std::env::split_paths(&list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            if !paths.is_empty() {
                return paths;
            }
        }
        std::env::var_os("HOME")
            .map(|home| vec![PathBuf::from(home).join(".kube").join("config")])
            .unwrap_or_default()
    }

    /// The contexts a user can pick, and the current one.
    pub fn contexts(&self) -> Result<Contexts> {
        let config = self.read()?;
        let contexts = config
            .contexts
            .iter()
            .map(|named| {
                let ctx = named.context.clone().unwrap_or_default();
                ContextInfo {
                    name: named.name.clone(),
                    cluster: ctx.cluster,
                    namespace: ctx.namespace,
                }
            })
            .collect();
        Ok(Contexts {
            contexts,
            current: config.current_context,
        })
    }

    /// A client for `context` (or the current context), plus the context's default namespace.
    ///
    /// Errors: [`Error::Config`] for an unknown context or unusable credentials.
    pub async fn connect(&self, context: Option<&str>) -> Result<Connection> {
        let kubeconfig = self.read()?;
        let options = KubeConfigOptions {
            context: context.map(str::to_owned),
            ..Default::default()
        };
        if let Some(ctx) = context
            && !kubeconfig.contexts.iter().any(|c| c.name == ctx)
        {
            let known: Vec<_> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(Error::Config(format!(
                "there is no context \"{ctx}\" (contexts: {})",
                known.join(", ")
            )));
        }
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| match context {
                Some(ctx) => Error::Config(format!("context \"{ctx}\": {e}")),
                None => Error::Config(e.to_string()),
            })?;
        if let Some(imp) = &self.impersonate {
            config.auth_info.impersonate = Some(imp.user.clone());
            config.auth_info.impersonate_groups =
                (!imp.groups.is_empty()).then(|| imp.groups.clone());
        }
        let default_namespace = config.default_namespace.clone();
        let client =
            Client::try_from(config.clone()).map_err(|e| Error::kube("build a client", e))?;
        Ok(Connection {
            client,
            config,
            context: context.map(str::to_owned),
            default_namespace,
        })
    }
}

/// A client bound to one kubeconfig context.
#[derive(Clone)]
pub struct Connection {
    /// The kube-rs client.
    pub client: Client,
    /// The configuration it was built from (for a second client, e.g. one without automatic
    /// retries for streams: [`crate::stream::stream_client`]).
    pub config: kube::Config,
    /// The context asked for (`None`: the current context).
    pub context: Option<String>,
    /// The context's namespace, or `default`.
    pub default_namespace: String,
}

/// The API server's clock relative to ours: `server_now ≈ Utc::now() + offset`.
///
/// Read from the `Date` header of a `/version` response (one-second resolution, and the
/// request's round trip is split evenly). Rules that judge expiry use server time so that a
/// skewed workstation neither steals a live claim nor keeps a dead one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerClock {
    /// Server time minus local time.
    pub offset: SignedDuration,
    /// How wrong this machine's clock is taken to be; zero except when tests simulate a
    /// skewed workstation ([`ServerClock::measure_skewed`]).
    local_skew: SignedDuration,
}

impl ServerClock {
    /// Measures the offset against the API server.
    ///
    /// Errors: the server is unreachable, or sends no `Date` header.
    pub async fn measure(client: &Client) -> Result<Self> {
        Self::measure_skewed(client, SignedDuration::ZERO).await
    }

    /// Like [`ServerClock::measure`] on a machine whose clock is off by `skew`: shows that the
    /// rules judged with [`ServerClock::now`] do not depend on the local clock.
    pub async fn measure_skewed(client: &Client, skew: SignedDuration) -> Result<Self> {
        let request = http::Request::get("/version")
            .body(kube::client::Body::empty())
            .map_err(|e| Error::Config(format!("build /version request: {e}")))?;
        let sent = Timestamp::now() + skew;
        let response = client
            .send(request)
            .await
            .map_err(|e| Error::kube("read the API server's clock (GET /version)", e))?;
        let received = Timestamp::now() + skew;
        let date = response
            .headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
            .map(|d| d.timestamp())
            .ok_or_else(|| Error::Config("the API server sent no Date header".into()))?;
        let midpoint = sent + received.duration_since(sent) / 2;
        // The header truncates to whole seconds: its true value lies in [date, date + 1 s).
        let mut offset = (date + SignedDuration::from_millis(500)).duration_since(midpoint);
        // Within the header's resolution the clocks agree as far as can be told: keep the
        // local clock's sub-second precision rather than a ±0.5 s guess.
        if offset.abs() <= SignedDuration::from_secs(1) {
            offset = SignedDuration::ZERO;
        }
        Ok(ServerClock {
            offset,
            local_skew: skew,
        })
    }

    /// The API server's current time, as best known.
    pub fn now(&self) -> Timestamp {
        Timestamp::now() + self.local_skew + self.offset
    }
}
