//! The instance's kubeconfig: one cluster, one client-certificate user per sandbox user, and a
//! context per user named after the user (namespace `corral-vms`, current context `admin`).

use std::path::Path;

use anyhow::{Context, Result};
use data_encoding::BASE64;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::DEMO_NAMESPACE;
use crate::pki::{UserCert, restrict};

/// Writes the kubeconfig (mode 0600: it holds private keys).
pub fn write(
    path: &Path,
    name: &str,
    server: &str,
    ca_pem: &str,
    users: &[UserCert],
) -> Result<()> {
    let cluster = format!("corral-sandbox-{name}");
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster,
            "cluster": {
                "server": server,
                "certificate-authority-data": BASE64.encode(ca_pem.as_bytes()),
            }
        }],
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
    std::fs::write(path, serde_yaml::to_string(&doc)?)
        .with_context(|| format!("write {}", path.display()))?;
    restrict(path)
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
