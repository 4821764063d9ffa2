//! The instance's kubeconfig: one cluster, one client-certificate user per sandbox user, and a
//! context per user named after the user (namespace `corral-vms`, current context `admin`); and
//! the kubeconfigs of service accounts' bearer tokens (the broker's replicas, [`write_token`]).

use std::path::Path;

use anyhow::{Context, Result};
use data_encoding::BASE64;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::DEMO_NAMESPACE;
use crate::pki::UserCert;

/// Writes the kubeconfig (mode 0600: it holds private keys).
pub fn write(
    path: &Path,
    name: &str,
    server: &str,
    ca_pem: &str,
    users: &[UserCert],
) -> Result<()> {
    let cluster = cluster_name(name);
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry(name, server, ca_pem)],
        "users": users.iter().map(|u| json!({
            "name": u.name,
            "user": {
                "client-certificate-data": BASE64.encode(u.cert.cert_pem.as_bytes()),
                "client-key-data": BASE64.encode(u.cert.key_pem.as_bytes()),
            }
        })).collect::<Vec<_>>(),
        "contexts": users.iter().map(|u| json!({
            "name": u.name,
            "context": { "cluster": cluster, "user": u.name, "namespace": DEMO_NAMESPACE }
        })).collect::<Vec<_>>(),
        "current-context": "admin",
    });
    write_private(path, &serde_yaml::to_string(&doc)?)
}

/// Writes a kubeconfig (mode 0600 from its creation: it holds a credential) whose one context,
/// `user`, presents the bearer `token` (a service account's, from the TokenRequest API) to the
/// instance's API server, in `namespace`.
pub fn write_token(
    path: &Path,
    name: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
    namespace: &str,
) -> Result<()> {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry(name, server, ca_pem)],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": user,
            "context": { "cluster": cluster_name(name), "user": user, "namespace": namespace } }],
        "current-context": user,
    });
    write_private(path, &serde_yaml::to_string(&doc)?)
}

fn cluster_name(name: &str) -> String {
    format!("corral-sandbox-{name}")
}

fn cluster_entry(name: &str, server: &str, ca_pem: &str) -> serde_json::Value {
    json!({
        "name": cluster_name(name),
        "cluster": {
            "server": server,
            "certificate-authority-data": BASE64.encode(ca_pem.as_bytes()),
        }
    })
}

/// Writes `text` to a new file of mode 0600 (replacing one at `path`), so that the credential in
/// it is never readable by others, not even for a moment.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .with_context(|| format!("write {}", path.display()))
}

/// A client for `context` of the kubeconfig at `path`.
pub async fn client(path: &Path, context: &str) -> Result<Client> {
    Ok(Client::try_from(config(path, context).await?)?)
}

/// A client for `context` of the kubeconfig at `path` that acts as `user` in `groups` through
/// the API server's impersonation (`Impersonate-User`, `Impersonate-Group`); the context's user
/// must be allowed to impersonate them (`admin` is).
pub async fn client_impersonating(
    path: &Path,
    context: &str,
    user: &str,
    groups: &[&str],
) -> Result<Client> {
    let mut config = config(path, context).await?;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Ok(Client::try_from(config)?)
}

async fn config(path: &Path, context: &str) -> Result<Config> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..Default::default()
    };
    Ok(Config::from_custom_kubeconfig(kubeconfig, &options).await?)
}
