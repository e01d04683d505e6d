//! What is wrong with plexus's own configuration, typed. The CNI code of
//! each failure is chosen in `From<ConfigError> for CniError`, where the
//! plugin (or the daemon) answers.

use crate::cni::error::CniError;
use crate::logging::LogError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key that parsed but is not valid (`field`: its name).
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The configuration is not JSON at all.
    #[error("plexus configuration: {0}")]
    NotJson(String),
    /// A logging key (`logOptions`, ...).
    #[error(transparent)]
    Log(#[from] LogError),
    /// The protocol crate's failure decoding a key or a delegate's CNI
    /// configuration, already a CNI error naming its path.
    #[error(transparent)]
    Cni(#[from] CniError),
}

impl From<ConfigError> for CniError {
    fn from(e: ConfigError) -> CniError {
        match e {
            ConfigError::Invalid { field, reason } => CniError::invalid_config(field, reason),
            ConfigError::NotJson(reason) => CniError::decode("plexus configuration", reason),
            ConfigError::Log(e) => e.into(),
            ConfigError::Cni(e) => e,
        }
    }
}

impl ConfigError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::ErrorCode;

    #[test]
    fn each_failure_has_one_code() {
        let cases = [
            (
                ConfigError::invalid("chrootDir", "r"),
                ErrorCode::InvalidConfig,
            ),
            (ConfigError::NotJson("r".into()), ErrorCode::Decode),
            (
                ConfigError::Log(LogError::invalid("logOptions.maxAge", "r")),
                ErrorCode::InvalidConfig,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(CniError::from(e.clone()).code, code, "{e:?}");
        }
        let e = CniError::from(ConfigError::invalid("chrootDir", "r"));
        assert_eq!(e.details, "chrootDir: r");
        let e = CniError::from(ConfigError::NotJson("eof".into()));
        assert_eq!(e.details, "plexus configuration: eof");
        // A protocol error passes through unchanged.
        let inner = CniError::invalid_config("delegates[0].type", "missing");
        assert_eq!(CniError::from(ConfigError::from(inner.clone())), inner);
    }
}
