//! `CNI_ARGS` (cni-SPEC §2, cni-CONVENTIONS "CNI_ARGS"): `K=V` pairs separated
//! by semicolons. Parsing follows libcni's `types.LoadArgs`: every pair has
//! exactly one `=`, `IgnoreUnknown` is a boolean, and unknown keys are an error
//! unless `IgnoreUnknown` is true. Unlike libcni, empty segments (a trailing
//! `;`) are skipped rather than rejected.

use std::fmt;

use super::error::CniError;

const VAR: &str = "CNI_ARGS";
const IGNORE_UNKNOWN: &str = "IgnoreUnknown";

/// Well-known keys Kubernetes runtimes (kubelet/CRI) send.
pub const K8S_POD_NAMESPACE: &str = "K8S_POD_NAMESPACE";
pub const K8S_POD_NAME: &str = "K8S_POD_NAME";
pub const K8S_POD_INFRA_CONTAINER_ID: &str = "K8S_POD_INFRA_CONTAINER_ID";
pub const K8S_POD_UID: &str = "K8S_POD_UID";

/// Parsed `CNI_ARGS`, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
    ignore_unknown: bool,
}

impl CniArgs {
    /// No arguments (what `Default` gives, usable in a `static`).
    pub const EMPTY: CniArgs = CniArgs {
        pairs: Vec::new(),
        ignore_unknown: false,
    };

    pub fn parse(s: &str) -> Result<CniArgs, CniError> {
        let mut pairs = Vec::new();
        for segment in s.split(';').filter(|seg| !seg.is_empty()) {
            let mut parts = segment.split('=');
            let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(CniError::invalid_env(
                    VAR,
                    format!("invalid pair {segment:?}: expected exactly one '=' as in KEY=VALUE"),
                ));
            };
            if key.is_empty() {
                return Err(CniError::invalid_env(
                    VAR,
                    format!("invalid pair {segment:?}: the key is empty"),
                ));
            }
            pairs.push((key.to_string(), value.to_string()));
        }
        let mut args = CniArgs {
            pairs,
            ignore_unknown: false,
        };
        if let Some(v) = args.get(IGNORE_UNKNOWN) {
            // libcni's UnmarshallableBool: case-insensitive 1/true/0/false.
            args.ignore_unknown = match v.to_ascii_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(CniError::invalid_env(
                        VAR,
                        format!("{IGNORE_UNKNOWN}={v:?}: must be 1, true, 0 or false"),
                    ))
                }
            };
        }
        Ok(args)
    }

    /// The value of `key` (exact, case-sensitive); the last one if repeated.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn ignore_unknown(&self) -> bool {
        self.ignore_unknown
    }

    /// Code 4 naming the first key that is neither in `known` nor
    /// `IgnoreUnknown`, unless `IgnoreUnknown` is true.
    pub fn check_known(&self, known: &[&str]) -> Result<(), CniError> {
        if self.ignore_unknown {
            return Ok(());
        }
        match self
            .pairs
            .iter()
            .find(|(k, _)| k != IGNORE_UNKNOWN && !known.contains(&k.as_str()))
        {
            Some((k, v)) => Err(CniError::invalid_env(
                VAR,
                format!("unknown argument {k:?} (in {k}={v}); set {IGNORE_UNKNOWN}=1 to ignore it"),
            )),
            None => Ok(()),
        }
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    pub fn k8s_pod_namespace(&self) -> Option<&str> {
        self.get(K8S_POD_NAMESPACE)
    }

    pub fn k8s_pod_name(&self) -> Option<&str> {
        self.get(K8S_POD_NAME)
    }

    pub fn k8s_pod_infra_container_id(&self) -> Option<&str> {
        self.get(K8S_POD_INFRA_CONTAINER_ID)
    }

    pub fn k8s_pod_uid(&self) -> Option<&str> {
        self.get(K8S_POD_UID)
    }
}

/// The canonical `K=V;K=V` form (empty segments dropped).
impl fmt::Display for CniArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn parses_what_containerd_sends() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=1f2e-33",
        )
        .unwrap();
        assert!(a.ignore_unknown());
        assert_eq!(a.k8s_pod_namespace(), Some("default"));
        assert_eq!(a.k8s_pod_name(), Some("web-0"));
        assert_eq!(a.k8s_pod_infra_container_id(), Some("abc123"));
        assert_eq!(a.k8s_pod_uid(), Some("1f2e-33"));
        assert_eq!(a.pairs().len(), 5);
        assert_eq!(a.get("k8s_pod_name"), None);
    }

    #[test]
    fn empty_segments_skipped_and_display_is_canonical() {
        let a = CniArgs::parse(";FOO=BAR;;ABC=123;").unwrap();
        assert_eq!(
            a.pairs(),
            &[("FOO".into(), "BAR".into()), ("ABC".into(), "123".into())]
        );
        assert_eq!(a.to_string(), "FOO=BAR;ABC=123");
        assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());
        assert_eq!(CniArgs::parse("").unwrap().to_string(), "");
        // Empty values are fine, repeated keys: last wins.
        let a = CniArgs::parse("A=;A=2").unwrap();
        assert_eq!(a.get("A"), Some("2"));
        assert_eq!(a.to_string(), "A=;A=2");
    }

    #[test]
    fn bad_pairs_are_code_4_naming_cni_args_and_the_pair() {
        for (input, pair) in [
            ("FOO", "FOO"),
            ("A=1;B", "B"),
            ("=x", "=x"),
            ("A=b=c", "A=b=c"),
        ] {
            let e = CniArgs::parse(input).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidEnvironment);
            assert!(
                e.details.starts_with("CNI_ARGS: invalid pair"),
                "{}",
                e.details
            );
            assert!(e.details.contains(&format!("{pair:?}")), "{}", e.details);
        }
    }

    #[test]
    fn ignore_unknown_values() {
        for (v, want) in [
            ("1", true),
            ("true", true),
            ("True", true),
            ("TRUE", true),
            ("0", false),
            ("false", false),
        ] {
            let a = CniArgs::parse(&format!("IgnoreUnknown={v}")).unwrap();
            assert_eq!(a.ignore_unknown(), want, "{v}");
        }
        for v in ["", "yes", "2", "on"] {
            let e = CniArgs::parse(&format!("IgnoreUnknown={v}")).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidEnvironment);
            assert!(e.details.contains("IgnoreUnknown"), "{}", e.details);
        }
        assert!(!CniArgs::parse("A=1").unwrap().ignore_unknown());
    }

    #[test]
    fn check_known_names_the_unknown_key() {
        let a = CniArgs::parse("IP=10.0.0.2;FOO=bar").unwrap();
        assert_eq!(a.check_known(&["IP", "FOO"]), Ok(()));
        let e = a.check_known(&["IP"]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidEnvironment);
        assert!(
            e.details.starts_with("CNI_ARGS: unknown argument \"FOO\""),
            "{}",
            e.details
        );
        let a = CniArgs::parse("IgnoreUnknown=true;FOO=bar").unwrap();
        assert_eq!(a.check_known(&[]), Ok(()));
        let a = CniArgs::parse("IgnoreUnknown=0;FOO=bar").unwrap();
        assert!(a.check_known(&[]).is_err());
        // IgnoreUnknown itself is always known.
        assert_eq!(
            CniArgs::parse("IgnoreUnknown=0").unwrap().check_known(&[]),
            Ok(())
        );
    }
}
