//! The cluster as a directory of manifests (`kubectl apply -f DIR` shapes:
//! YAML or JSON, many documents per file). plexus's `manifestDir` key points
//! here; it stands in for the API server on nodes and in tests without one.

use std::collections::BTreeMap;
use std::path::Path;

use super::Cluster;
use super::ClusterError;
use super::NadSource;
use crate::manifest;
use crate::netattach::ipamclaim::{self, IpamClaim};
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::pod::Pod;

pub struct DirCluster {
    pods: BTreeMap<(String, String), Pod>,
    nads: BTreeMap<(String, String), NetworkAttachmentDefinition>,
    claims: BTreeMap<(String, String), IpamClaim>,
}

impl DirCluster {
    /// A directory holding one manifest file of `yaml`, loaded (for tests:
    /// the directory lives as long as the returned guard).
    #[cfg(test)]
    pub(crate) fn of_manifest(yaml: &str) -> (tempfile::TempDir, DirCluster) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("all.yaml"), yaml).unwrap();
        let cluster = DirCluster::load(dir.path()).unwrap();
        (dir, cluster)
    }

    /// Read every manifest under `path` (a directory or one file).
    pub fn load(path: &Path) -> Result<DirCluster, ClusterError> {
        let docs = manifest::load(path).map_err(|e| e.within("manifestDir"))?;
        let mut pods = BTreeMap::new();
        for doc in docs.iter().filter(|d| d.kind() == Some("Pod")) {
            let pod = manifest::pod(doc)?;
            pods.insert((pod.namespace.clone(), pod.name.clone()), pod);
        }
        let mut claims = BTreeMap::new();
        for doc in docs.iter().filter(|d| d.kind() == Some(ipamclaim::KIND)) {
            let claim = IpamClaim::from_value(&doc.value).map_err(|e| e.within(&doc.origin))?;
            let namespace = claim
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| manifest::DEFAULT_NAMESPACE.into());
            claims.insert((namespace, claim.metadata.name.clone()), claim);
        }
        Ok(DirCluster {
            pods,
            nads: manifest::nads(&docs)?,
            claims,
        })
    }

    /// A cluster with nothing in it: pods get only the default networks.
    pub fn empty() -> DirCluster {
        DirCluster {
            pods: BTreeMap::new(),
            nads: BTreeMap::new(),
            claims: BTreeMap::new(),
        }
    }
}

impl NadSource for DirCluster {
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&NetworkAttachmentDefinition>, ClusterError> {
        Ok(self.nads.get(&(namespace.to_string(), name.to_string())))
    }
}

impl Cluster for DirCluster {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ClusterError> {
        Ok(self
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    fn ipam_claim(&self, namespace: &str, name: &str) -> Result<Option<IpamClaim>, ClusterError> {
        Ok(self
            .claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netattach::error::SpecError;

    #[test]
    fn loads_pods_and_nads_from_a_directory() {
        let (_dir, cluster) = DirCluster::of_manifest(
            "kind: Pod\nmetadata: {name: p, namespace: ns, annotations: {k8s.v1.cni.cncf.io/networks: net-a}}\n---\n\
             apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: net-a, namespace: ns}\n",
        );
        assert_eq!(
            cluster.pod("ns", "p").unwrap().unwrap().annotations["k8s.v1.cni.cncf.io/networks"],
            "net-a"
        );
        assert!(cluster.pod("ns", "q").unwrap().is_none());
        assert!(NadSource::get(&cluster, "ns", "net-a").unwrap().is_some());
        assert!(NadSource::get(&cluster, "other", "net-a")
            .unwrap()
            .is_none());
    }

    #[test]
    fn bad_manifests_name_the_key() {
        let err = match DirCluster::load(Path::new("/nonexistent/plexus")) {
            Err(e) => e,
            Ok(_) => panic!("loaded a missing directory"),
        };
        assert!(
            matches!(&err, ClusterError::Object(SpecError::Io { what, .. })
                if what == "manifestDir./nonexistent/plexus"),
            "{err:?}"
        );
    }
}
