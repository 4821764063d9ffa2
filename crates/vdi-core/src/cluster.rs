//! Connecting to a cluster: kubeconfig and contexts, and clients (acting as the kubeconfig's
//! user, or impersonating another through the cluster's own impersonation). Who a client is
//! comes from [`crate::identity`], the API server's clock from [`crate::clock`].

use std::path::PathBuf;

use kube::Client;
use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig};

use serde::Serialize;

use crate::error::{Error, ErrorView, Result};
use crate::guard::GuardStatus;
use crate::identity::Identity;
use crate::scope::Scope;

/// A kubeconfig context the user can pick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ContextInfo {
    /// Context name.
    pub name: String,
    /// Cluster name it points at.
    pub cluster: String,
    /// The context's default namespace, if it sets one.
    pub namespace: Option<String>,
    /// The namespace the console opens this context in: the context's own (trimmed) when it
    /// sets a non-blank one, else [`FALLBACK_NAMESPACE`].
    pub start_namespace: String,
}

/// The namespace the console opens a context in when the context names none (the sandbox's
/// and the SPEC's pool namespace).
pub const FALLBACK_NAMESPACE: &str = "corral-vms";

impl ContextInfo {
    /// The context `name` on `cluster` with default namespace `namespace`.
    pub fn new(name: String, cluster: String, namespace: Option<String>) -> Self {
        let start_namespace = namespace
            .as_deref()
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
            .unwrap_or(FALLBACK_NAMESPACE)
            .to_owned();
        ContextInfo {
            name,
            cluster,
            namespace,
            start_namespace,
        }
    }
}

/// The kubeconfig files were written: what the desktop app tells its window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigChanged {
    /// Contexts whose definition changed (server, CA, credentials, namespace), appeared or
    /// disappeared, sorted by name; the window reconnects when its own is among them. Empty
    /// when the files could not be read (the window reads them again and shows why).
    pub changed_contexts: Vec<String>,
}

/// The kubeconfig's contexts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Contexts {
    /// All contexts, in file order.
    pub contexts: Vec<ContextInfo>,
    /// `current-context`, if set.
    pub current: Option<String>,
}

/// What the desktop app shows about itself in its footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct AppInfo {
    /// The app's version.
    pub version: String,
    /// The log file being written.
    pub log_path: String,
    /// The kubeconfig files in use.
    pub kubeconfig_paths: Vec<String>,
}

/// What connecting to a cluster reached: the context, who you are there, the scope, the guard.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    /// The context asked for (`null`: the current context).
    pub context: Option<String>,
    /// Who the API server says you are (SelfSubjectReview); `null` if it could not say.
    pub identity: Option<Identity>,
    /// Why the identity is unknown.
    pub identity_error: Option<ErrorView>,
    /// The namespaces the live view covers.
    pub scope: Scope,
    /// Whether the cluster has Corral VDI's server-side guard; `null` if it could not be read.
    pub guard: Option<GuardStatus>,
}

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
    /// Reads and merges the kubeconfig like kubectl: `--kubeconfig` alone if given; else the
    /// `KUBECONFIG` list, skipping empty entries and files that do not exist, merged with the
    /// first file winning for a name set twice; else `~/.kube/config`. Relative paths (files,
    /// and exec commands with a path separator) are taken from each file's folder; an exec
    /// command found only on your login shell's PATH (a desktop launch has a minimal one) is
    /// given its full path.
    ///
    /// Errors: [`Error::Config`] naming the file when it is missing or malformed, or the list
    /// when none of its files exists.
    pub fn read(&self) -> Result<Kubeconfig> {
        let read = |path: &std::path::Path| {
            Kubeconfig::read_from(path).map_err(|e| {
                // kube's read error names the path again (quoted, in Debug form): keep the
                // cause alone, this message names the file.
                let cause = match &e {
                    kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
                    other => other.to_string(),
                };
                Error::Config(format!(
                    "cannot read the kubeconfig {}: {cause}",
                    path.display()
                ))
            })
        };
        let mut config = match &self.path {
            Some(path) => read(path)?,
            None => match std::env::var_os("KUBECONFIG") {
                Some(list) if std::env::split_paths(&list).any(|p| !p.as_os_str().is_empty()) => {
                    let named: Vec<PathBuf> = std::env::split_paths(&list)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect();
                    let present: Vec<&PathBuf> = named.iter().filter(|p| p.exists()).collect();
                    if present.is_empty() {
                        return Err(Error::Config(format!(
                            "none of the files KUBECONFIG names exists ({})",
                            named
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    let mut merged = Kubeconfig::default();
                    for path in present {
                        merged = merged
                            .merge(read(path)?)
                            .map_err(|e| Error::Config(format!("merge {}: {e}", path.display())))?;
                    }
                    merged
                }
                _ => {
                    let default = self.paths().into_iter().next().ok_or_else(|| {
                        Error::Config(
                            "no kubeconfig: HOME is not set and KUBECONFIG is empty".into(),
                        )
                    })?;
                    read(&default)?
                }
            },
        };
        resolve_exec_commands(&mut config);
        Ok(config)
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
                ContextInfo::new(named.name.clone(), ctx.cluster, ctx.namespace)
            })
            .collect();
        Ok(Contexts {
            contexts,
            current: config.current_context,
        })
    }

    /// The scope a window opens `context` (`None`: the current context) with: its start
    /// namespace ([`ContextInfo::start_namespace`]), and the context's name.
    ///
    /// Errors: as [`KubeconfigSource::read`]; [`Error::Config`] when `context` is unknown, or
    /// when none is given and the kubeconfig names no current context.
    pub fn start_scope(&self, context: Option<&str>) -> Result<(String, Scope)> {
        let Contexts { contexts, current } = self.contexts()?;
        let name = match context {
            Some(name) => name.to_owned(),
            None => current.ok_or_else(|| {
                Error::Config(
                    "the kubeconfig names no current context: pick one of its contexts".into(),
                )
            })?,
        };
        let info = contexts
            .into_iter()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::Config(format!("there is no context \"{name}\"")))?;
        Ok((name, Scope::Namespace(info.start_namespace)))
    }

    /// A value per context that changes whenever the context, its cluster or its user entry
    /// changes (a new server address, CA or credentials), to notice which contexts a rewritten
    /// kubeconfig changed. Compared within this process only, never shown: it is derived from
    /// credentials.
    ///
    /// Errors: as [`KubeconfigSource::read`].
    pub fn fingerprints(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        use std::hash::{Hash, Hasher};
        let config = self.read()?;
        Ok(config
            .contexts
            .iter()
            .map(|named| {
                let context = named.context.as_ref();
                let cluster =
                    context.and_then(|c| config.clusters.iter().find(|k| k.name == c.cluster));
                let user = context
                    .and_then(|c| c.user.as_ref())
                    .and_then(|u| config.auth_infos.iter().find(|a| &a.name == u));
                let text = serde_json::to_string(&(named, cluster, user)).unwrap_or_default();
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                text.hash(&mut hasher);
                (named.name.clone(), hasher.finish())
            })
            .collect())
    }

    /// The contexts whose [`fingerprints`](Self::fingerprints) differ between `before` and
    /// `after`: changed, added or removed, sorted by name.
    pub fn changed_contexts(
        before: &std::collections::BTreeMap<String, u64>,
        after: &std::collections::BTreeMap<String, u64>,
    ) -> Vec<String> {
        let names: std::collections::BTreeSet<&String> =
            before.keys().chain(after.keys()).collect();
        names
            .into_iter()
            .filter(|name| before.get(*name) != after.get(*name))
            .cloned()
            .collect()
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
        let user = kubeconfig
            .contexts
            .iter()
            .find(|c| Some(c.name.as_str()) == context.or(kubeconfig.current_context.as_deref()))
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone());
        if let Some(named) = kubeconfig
            .auth_infos
            .iter()
            .find(|a| Some(&a.name) == user.as_ref())
            && let Some(exec) = named.auth_info.as_ref().and_then(|a| a.exec.as_ref())
        {
            check_exec_command(&named.name, exec)?;
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
        let clients = crate::credentials::clients(config.clone()).await?;
        Ok(Connection {
            client: clients.main,
            streams: clients.streams,
            credentials: clients.state,
            config,
            context: context.map(str::to_owned),
            default_namespace,
        })
    }
}

/// Your login shell's PATH (`$SHELL -l -i -c`), asked once: a desktop launch gets a minimal
/// PATH, while exec plugins (cloud CLIs) are usually installed where only the shell's startup
/// files put them. `None` when there is no shell or it does not answer within 3 s.
fn login_shell_path() -> Option<&'static str> {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let shell = std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into());
        let mut child = std::process::Command::new(&shell)
            .args([
                "-l",
                "-i",
                "-c",
                "printf '\\n__CORRAL_PATH__%s\\n' \"$PATH\"",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while child.try_wait().ok()?.is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut()?, &mut out).ok()?;
        out.lines()
            .find_map(|l| l.strip_prefix("__CORRAL_PATH__"))
            .map(str::to_owned)
    })
    .as_deref()
}

/// Gives a bare exec command found only on the login shell's PATH its full path.
fn resolve_exec_commands(config: &mut Kubeconfig) {
    for named in &mut config.auth_infos {
        let Some(exec) = named.auth_info.as_mut().and_then(|a| a.exec.as_mut()) else {
            continue;
        };
        let Some(command) = exec.command.clone() else {
            continue;
        };
        if command.contains(std::path::MAIN_SEPARATOR) || which::which(&command).is_ok() {
            continue;
        }
        let cwd = std::env::current_dir().unwrap_or_default();
        if let Some(path) = login_shell_path()
            && let Ok(found) = which::which_in(&command, Some(path), cwd)
        {
            tracing::info!(%command, found = %found.display(), "exec plugin found on the login shell's PATH");
            exec.command = Some(found.display().to_string());
        }
    }
}

/// Refuses an exec plugin that cannot be run, saying which command, where it was looked for
/// and the fix (the kubeconfig's `installHint` when it has one) — never a bare "os error 2".
fn check_exec_command(user: &str, exec: &kube::config::ExecConfig) -> Result<()> {
    let Some(command) = &exec.command else {
        return Err(Error::Config(format!(
            "the kubeconfig's user \"{user}\" has an exec plugin without a command"
        )));
    };
    let found = if command.contains(std::path::MAIN_SEPARATOR) {
        std::path::Path::new(command).is_file()
    } else {
        which::which(command).is_ok()
    };
    if found {
        return Ok(());
    }
    let here = std::env::var("PATH").unwrap_or_default();
    let shell = login_shell_path().unwrap_or("(no login shell answered)");
    let hint = exec
        .install_hint
        .as_deref()
        .map(|h| format!(" {}", h.trim()))
        .unwrap_or_default();
    Err(Error::Config(format!(
        "the kubeconfig's user \"{user}\" gets its credentials by running `{command}`, which was \
         not found: not on PATH ({here}) nor on your login shell's PATH ({shell}); install it or \
         give its full path in the kubeconfig.{hint}"
    )))
}

/// A client bound to one kubeconfig context.
#[derive(Clone)]
pub struct Connection {
    /// The kube-rs client.
    pub client: Client,
    /// A client for KubeVirt's streams: the same credentials, no automatic retries.
    pub streams: Client,
    /// Where the credentials stand (renewed before they expire when an exec plugin issues
    /// them; [`crate::credentials`]).
    pub credentials: tokio::sync::watch::Receiver<crate::credentials::CredentialState>,
    /// The configuration it was built from.
    pub config: kube::Config,
    /// The context asked for (`None`: the current context).
    pub context: Option<String>,
    /// The context's namespace, or `default`.
    pub default_namespace: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_starts_in_its_own_namespace_else_the_fallback() {
        let start = |ns: Option<&str>| {
            ContextInfo::new("c".into(), "k".into(), ns.map(str::to_owned)).start_namespace
        };
        assert_eq!(start(Some("team-a")), "team-a");
        assert_eq!(start(Some(" team-a ")), "team-a");
        assert_eq!(start(Some("  ")), FALLBACK_NAMESPACE);
        assert_eq!(start(None), "corral-vms");
    }

    fn kubeconfig(server: &str, token: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
current-context: a
clusters:
- name: one
  cluster: {{ server: {server} }}
- name: two
  cluster: {{ server: https://two.example:6443 }}
users:
- name: alice
  user: {{ token: {token} }}
contexts:
- name: a
  context: {{ cluster: one, user: alice }}
- name: b
  context: {{ cluster: two, user: alice, namespace: vdi }}
"
        )
    }

    /// What `read` makes of a kubeconfig file holding `text`.
    fn with_kubeconfig<T>(text: &str, read: impl FnOnce(&KubeconfigSource) -> T) -> T {
        let dir = std::env::temp_dir().join(format!(
            "corral-kubeconfig-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, text).unwrap();
        let source = KubeconfigSource {
            path: Some(path),
            impersonate: None,
        };
        let out = read(&source);
        std::fs::remove_dir_all(&dir).unwrap();
        out
    }

    fn fingerprints(text: &str) -> std::collections::BTreeMap<String, u64> {
        with_kubeconfig(text, |source| source.fingerprints().unwrap())
    }

    #[test]
    fn a_window_starts_in_the_contexts_own_namespace_else_the_fallback() {
        let text = kubeconfig("https://127.0.0.1:6443", "t1");
        let ns = |name: &str| Scope::Namespace(name.to_owned());
        with_kubeconfig(&text, |source| {
            assert_eq!(
                source.start_scope(None).unwrap(),
                ("a".to_owned(), ns(crate::cluster::FALLBACK_NAMESPACE))
            );
            assert_eq!(
                source.start_scope(Some("b")).unwrap(),
                ("b".to_owned(), ns("vdi"))
            );
            let unknown = source.start_scope(Some("c")).unwrap_err().to_string();
            assert!(unknown.contains("no context \"c\""), "{unknown}");
        });
        let no_current = text.replace("current-context: a\n", "");
        with_kubeconfig(&no_current, |source| {
            let refused = source.start_scope(None).unwrap_err().to_string();
            assert!(refused.contains("no current context"), "{refused}");
        });
    }

    #[test]
    fn a_missing_kubeconfig_is_named_once_without_quotes() {
        let source = KubeconfigSource {
            path: Some(PathBuf::from("/nonexistent/corral-kubeconfig")),
            impersonate: None,
        };
        let text = source.read().unwrap_err().to_string();
        assert!(
            text.contains("cannot read the kubeconfig /nonexistent/corral-kubeconfig: "),
            "{text}"
        );
        assert_eq!(
            text.matches("/nonexistent/corral-kubeconfig").count(),
            1,
            "{text}"
        );
        assert!(!text.contains('"'), "{text}");
    }

    #[test]
    fn a_new_server_address_changes_only_the_contexts_on_that_cluster() {
        let before = fingerprints(&kubeconfig("https://127.0.0.1:6443", "t1"));
        let same = fingerprints(&kubeconfig("https://127.0.0.1:6443", "t1"));
        assert!(KubeconfigSource::changed_contexts(&before, &same).is_empty());
        let moved = fingerprints(&kubeconfig("https://127.0.0.1:7443", "t1"));
        assert_eq!(KubeconfigSource::changed_contexts(&before, &moved), ["a"]);
    }

    #[test]
    fn new_credentials_change_every_context_of_that_user() {
        let before = fingerprints(&kubeconfig("https://127.0.0.1:6443", "t1"));
        let renewed = fingerprints(&kubeconfig("https://127.0.0.1:6443", "t2"));
        assert_eq!(
            KubeconfigSource::changed_contexts(&before, &renewed),
            ["a", "b"]
        );
    }

    #[test]
    fn added_and_removed_contexts_count_as_changed() {
        let before: std::collections::BTreeMap<String, u64> =
            [("a".to_owned(), 1), ("b".to_owned(), 2)].into();
        let after = [("b".to_owned(), 2), ("c".to_owned(), 3)].into();
        assert_eq!(
            KubeconfigSource::changed_contexts(&before, &after),
            ["a", "c"]
        );
    }
}
