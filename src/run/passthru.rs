//! The first plugin of Multus's auxiliary chain (`crate::plan::auxiliary`),
//! built in where Multus ships it as a binary: it gives the chained plugins
//! after it the `prevResult` they require.

use crate::cni::error::CniError;
use crate::cni::result::CniResult;
use crate::cni::skel::{Plugin, Request};

/// `passthru`: ADD returns an empty result in the request's version, every
/// other command succeeds doing nothing (multus-cni cmd/passthru-cni).
pub struct Passthru;

impl Plugin for Passthru {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        Ok(CniResult {
            cni_version: Some(req.cni_version),
            ..CniResult::default()
        })
    }

    fn del(&self, _: &Request) -> Result<(), CniError> {
        Ok(())
    }
}
