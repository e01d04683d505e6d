//! CNI specification versions and version selection (cni-SPEC.md §1 "Version
//! considerations").

use std::fmt;
use std::str::FromStr;

use super::error::CniError;

/// The spec versions plexus speaks, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl CniVersion {
    pub const ALL: [CniVersion; 7] = [
        CniVersion::V0_1_0,
        CniVersion::V0_2_0,
        CniVersion::V0_3_0,
        CniVersion::V0_3_1,
        CniVersion::V0_4_0,
        CniVersion::V1_0_0,
        CniVersion::V1_1_0,
    ];
    pub const LATEST: CniVersion = CniVersion::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            CniVersion::V0_1_0 => "0.1.0",
            CniVersion::V0_2_0 => "0.2.0",
            CniVersion::V0_3_0 => "0.3.0",
            CniVersion::V0_3_1 => "0.3.1",
            CniVersion::V0_4_0 => "0.4.0",
            CniVersion::V1_0_0 => "1.0.0",
            CniVersion::V1_1_0 => "1.1.0",
        }
    }

    /// Every version plexus speaks, as strings, oldest first (the
    /// `supportedVersions` of cni-SPEC §5 "VERSION Success").
    pub fn supported_versions() -> Vec<&'static str> {
        CniVersion::ALL.iter().map(|v| v.as_str()).collect()
    }

    /// Results of this version use `ip4`/`ip6` (0.1.0, 0.2.0) rather than
    /// `interfaces`/`ips` (0.3.0 and later).
    pub fn has_legacy_result(self) -> bool {
        self < CniVersion::V0_3_0
    }

    /// Parse a version string, naming `field` in the error.
    pub fn parse_field(s: &str, field: &str) -> Result<CniVersion, CniError> {
        s.parse().map_err(|_| {
            CniError::incompatible_version(
                field,
                format!(
                    "{s:?} is not a CNI version plexus supports (supported: {})",
                    CniVersion::supported_versions().join(", ")
                ),
            )
        })
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVersion(pub String);

impl FromStr for CniVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CniVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnknownVersion(s.to_string()))
    }
}
