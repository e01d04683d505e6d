//! The daemon's credentials, followed in place (issue 47 item 1).
//!
//! The installer rewrites the daemon's kubeconfig whenever the service
//! account's projected token rotates (kubelet rotates it at 80% of its
//! life, about every 48 minutes). The daemon used to stop on every rewrite,
//! dropping and relisting every watch; now its client reads the bearer
//! token and the cluster's CA from the kubeconfig as it is when each
//! request is sent:
//! - before every request the file is `stat`ed (and the `tokenFile` or CA
//!   file it names), and read again only when one changed: a rotated token
//!   is sent from the first request after the rewrite, and a revoked one
//!   never again once its successor is there;
//! - new connections verify the server with the CA as it is then; open ones
//!   (and the watches on them) go on, having verified it already;
//! - a rewrite that cannot be read keeps what was last read, with a
//!   warning (the installer writes the file whole, by rename).
//!
//! Chosen over kube-rs's `tokenFile` re-read (once a minute, so a token
//! revoked right after its rotation would be sent for up to a minute) and
//! over in-cluster config (the thin plugin reads the same kubeconfig).
//! Only what a rotation changes is followed: the token (inline or
//! `tokenFile`) and the CA (inline or a file). A change of anything else
//! the client was built from (the server, client certificates, an exec
//! plugin, the context) is told apart by [`fixed_part`], and the daemon
//! stops to be started on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use base64::Engine;
use hyper::header::HeaderValue;
use kube::config::{Cluster, Kubeconfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use secrecy::ExposeSecret;

/// What identifies a file's content without reading it.
type Stamp = Option<(u64, SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?, meta.ino()))
}

/// What was read, and the stamps of the files it was read from.
struct Loaded {
    stamps: Vec<(PathBuf, Stamp)>,
    authorization: HeaderValue,
    verifier: Arc<WebPkiServerVerifier>,
}

/// A bearer token and CA that follow the kubeconfig.
pub struct LiveCredentials {
    kubeconfig: PathBuf,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for LiveCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCredentials")
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl LiveCredentials {
    /// The credentials of `kubeconfig`'s current context, when it
    /// authenticates with a bearer token and names a CA: `Ok(None)` when it
    /// does otherwise (client certificates, an exec plugin: the client is
    /// built as kube-rs builds it, and a change restarts the daemon).
    pub fn follow(kubeconfig: &Path) -> Result<Option<Arc<LiveCredentials>>, String> {
        let Some(loaded) = load(kubeconfig)? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(LiveCredentials {
            kubeconfig: kubeconfig.to_path_buf(),
            loaded: RwLock::new(loaded),
        })))
    }

    /// The `Authorization` header to send now, after reading the files
    /// again if one changed.
    pub fn authorization(&self) -> HeaderValue {
        self.refresh();
        self.read().authorization.clone()
    }

    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        self.refresh();
        self.read().verifier.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the files again if one changed since they were read.
    fn refresh(&self) {
        let changed = self
            .read()
            .stamps
            .iter()
            .any(|(path, was)| stamp(path) != *was);
        if !changed {
            return;
        }
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        if !loaded.stamps.iter().any(|(path, was)| stamp(path) != *was) {
            return; // another request read them meanwhile
        }
        match load(&self.kubeconfig) {
            Ok(Some(fresh)) => {
                tracing::info!(kubeconfig = %self.kubeconfig.display(), "credentials read again");
                *loaded = fresh;
            }
            Ok(None) => {
                // No longer a token: the daemon stops on it (fixed_part).
                loaded.stamps = stamps_now(&loaded.stamps);
            }
            Err(reason) => {
                tracing::warn!(kubeconfig = %self.kubeconfig.display(), %reason,
                    "the kubeconfig changed but cannot be read: the credentials read last are kept");
                loaded.stamps = stamps_now(&loaded.stamps);
            }
        }
    }

    /// A TLS configuration whose server verification follows the CA.
    pub fn tls_config(self: &Arc<Self>) -> rustls::ClientConfig {
        rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(FollowingVerifier(self.clone())))
            .with_no_client_auth()
    }
}

fn stamps_now(stamps: &[(PathBuf, Stamp)]) -> Vec<(PathBuf, Stamp)> {
    stamps.iter().map(|(p, _)| (p.clone(), stamp(p))).collect()
}

/// The current context's cluster and user of `kubeconfig`.
fn current(kubeconfig: &Kubeconfig) -> Result<(Cluster, kube::config::AuthInfo), String> {
    let context_name = kubeconfig
        .current_context
        .as_deref()
        .ok_or("no current-context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| format!("no context {context_name:?}"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| format!("no cluster {:?}", context.cluster))?;
    let user_name = context.user.unwrap_or_default();
    let user = kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .unwrap_or_default();
    Ok((cluster, user))
}

/// A path of the kubeconfig, relative to its directory.
fn beside(kubeconfig: &Path, path: &str) -> PathBuf {
    kubeconfig.parent().unwrap_or(Path::new("/")).join(path)
}

fn load(kubeconfig: &Path) -> Result<Option<Loaded>, String> {
    let mut stamps = vec![(kubeconfig.to_path_buf(), stamp(kubeconfig))];
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let (cluster, user) = current(&parsed)?;
    let token = match (&user.token, &user.token_file) {
        (Some(token), _) => token.expose_secret().trim().to_string(),
        (None, Some(file)) => {
            let path = beside(kubeconfig, file);
            stamps.push((path.clone(), stamp(&path)));
            let token = std::fs::read_to_string(&path)
                .map_err(|e| format!("tokenFile {}: {e}", path.display()))?;
            token.trim().to_string()
        }
        (None, None) => return Ok(None),
    };
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("certificate-authority-data: {e}"))?,
        (None, Some(file)) => {
            let path = beside(kubeconfig, file);
            stamps.push((path.clone(), stamp(&path)));
            std::fs::read(&path)
                .map_err(|e| format!("certificate-authority {}: {e}", path.display()))?
        }
        (None, None) => return Ok(None),
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert = cert.map_err(|e| format!("the CA: {e}"))?;
        roots.add(cert).map_err(|e| format!("the CA: {e}"))?;
    }
    let verifier = WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|e| format!("the CA: {e}"))?;
    let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "the token is not a valid header value".to_string())?;
    authorization.set_sensitive(true);
    Ok(Some(Loaded {
        stamps,
        authorization,
        verifier,
    }))
}

/// What of `kubeconfig`'s current context a client cannot follow in place:
/// everything but the token and the CA, as text to compare.
pub fn fixed_part(kubeconfig: &Path) -> Result<String, String> {
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let (mut cluster, user) = current(&parsed)?;
    cluster.certificate_authority = None;
    cluster.certificate_authority_data = None;
    let followed = user.token.is_some() || user.token_file.is_some();
    let identity = (
        user.client_certificate.clone(),
        user.client_certificate_data.clone(),
        user.client_key.clone(),
        user.exec.as_ref().map(|e| format!("{e:?}")),
        user.auth_provider.as_ref().map(|p| format!("{p:?}")),
        followed,
    );
    let client_key_data = user
        .client_key_data
        .as_ref()
        .map(|k| k.expose_secret().to_string());
    Ok(format!(
        "{:?}|{:?}|{identity:?}|{client_key_data:?}",
        parsed.current_context,
        serde_json::to_string(&cluster).unwrap_or_default()
    ))
}

/// Verifies the server with the CA as it is now.
#[derive(Debug)]
struct FollowingVerifier(Arc<LiveCredentials>);

impl ServerCertVerifier for FollowingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.verifier().supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA (openssl, EC P-256), for parsing only.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBgDCCASWgAwIBAgIUVrQf5d//S01a0fbXxYRIx9wc0VQwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJdGVzdC1jYS0xMCAXDTI2MDMwNDEzMDk1MFoYDzIxMjYwMjA4
MTMwOTUwWjAUMRIwEAYDVQQDDAl0ZXN0LWNhLTEwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARg57mWJPDsAIEQAgXqMOOfjMQP+PE9HqcZobycO8z94r/uRuV0wKx/
0SvMsKFtnreut0bjgFtmZaWY+6d87Is9o1MwUTAdBgNVHQ4EFgQUjtGuhkM7LtHB
gMPCJIxMwbY69OQwHwYDVR0jBBgwFoAUjtGuhkM7LtHBgMPCJIxMwbY69OQwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEAj/WzNVJDg/cBtLqQVM77
tkB+QyIXLG3Vi9Xj1YfW9QECIQDDFW8yFtgLeCg2Zhr4xQNq3/24r/01kI2rjFPO
xBkDMw==
-----END CERTIFICATE-----
";

    fn kubeconfig(dir: &Path, server: &str, user: &str) -> PathBuf {
        std::fs::write(dir.join("ca.crt"), CA).unwrap();
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: \"{server}\", certificate-authority: ca.crt}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             users: [{{name: u, user: {user}}}]\n"
        );
        // Written whole by rename, as the installer writes it.
        let path = dir.join("kubeconfig");
        std::fs::write(dir.join(".kubeconfig.tmp"), text).unwrap();
        std::fs::rename(dir.join(".kubeconfig.tmp"), &path).unwrap();
        path
    }

    #[test]
    fn a_rotated_token_is_sent_from_the_next_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", "{token: one}");
        let live = LiveCredentials::follow(&path).unwrap().unwrap();
        assert_eq!(live.authorization(), "Bearer one");
        let fixed = fixed_part(&path).unwrap();
        kubeconfig(dir.path(), "https://10.0.0.1:6443", "{token: two}");
        assert_eq!(live.authorization(), "Bearer two");
        assert_eq!(fixed_part(&path).unwrap(), fixed, "a token is followed");
        // A token file beside it, rewritten.
        std::fs::write(dir.path().join("token"), "three\n").unwrap();
        kubeconfig(dir.path(), "https://10.0.0.1:6443", "{tokenFile: token}");
        assert_eq!(live.authorization(), "Bearer three");
        std::fs::write(dir.path().join("token.tmp"), "four").unwrap();
        std::fs::rename(dir.path().join("token.tmp"), dir.path().join("token")).unwrap();
        assert_eq!(live.authorization(), "Bearer four");
        // An unreadable rewrite keeps the last credentials.
        std::fs::write(&path, "clusters: [").unwrap();
        assert_eq!(live.authorization(), "Bearer four");
        // Another server is no rotation.
        kubeconfig(dir.path(), "https://10.0.0.2:6443", "{token: two}");
        assert_ne!(fixed_part(&path).unwrap(), fixed);
    }

    /// A CA rewritten (the file the kubeconfig names) is read again: new
    /// connections verify the server with it; one that does not parse
    /// keeps the last.
    #[test]
    fn a_rotated_ca_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", "{token: one}");
        let live = LiveCredentials::follow(&path).unwrap().unwrap();
        let first = live.verifier();
        assert!(
            Arc::ptr_eq(&first, &live.verifier()),
            "unchanged: not read again"
        );
        let ca = dir.path().join("ca.crt");
        std::fs::write(dir.path().join("ca.tmp"), format!("{CA}{CA}")).unwrap();
        std::fs::rename(dir.path().join("ca.tmp"), &ca).unwrap();
        let second = live.verifier();
        assert!(!Arc::ptr_eq(&first, &second), "the new CA read");
        std::fs::write(&ca, "not a certificate").unwrap();
        assert!(Arc::ptr_eq(&second, &live.verifier()), "the last CA kept");
        assert_eq!(live.authorization(), "Bearer one");
    }

    #[test]
    fn client_certificates_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(
            dir.path(),
            "https://10.0.0.1:6443",
            "{client-certificate: c.crt, client-key: c.key}",
        );
        assert!(LiveCredentials::follow(&path).unwrap().is_none());
    }
}
