//! Dynamic Resource Allocation (`resource.k8s.io/v1`) on the test kit's
//! API server, standing in for a Kubernetes 1.34+ cluster.
//!
//! **Why stand-ins:** the kube-apiserver these machines build is 1.20
//! (Debian's; the kubernetes repository is too large to fetch), and it does
//! not serve `resource.k8s.io`. So:
//!
//! - [`serve`] serves `resource.k8s.io/v1` DeviceClass, ResourceClaim,
//!   ResourceClaimTemplate and ResourceSlice as custom resources, their
//!   schemas transcribed from the published v1 types (k8s.io/api
//!   `resource/v1/types.go`, as of 1.34: every field, alpha ones
//!   included), with the `api-approved.kubernetes.io` annotation a
//!   `*.k8s.io` group requires. What a real 1.34 server does beyond the
//!   schema is not played: its validation (DNS labels, one of
//!   nodeName/nodeSelector/allNodes, ...), the field selectors on a slice's
//!   `spec.nodeName` and `spec.driver` (a custom resource of 1.20 selects on
//!   `metadata.name` and `metadata.namespace` only, so plexus's fallback, a
//!   LIST of every slice, runs here), and the Pod fields
//!   `spec.resourceClaims` and `status.resourceClaimStatuses`, which a 1.20
//!   server drops (so the claims' `status.reservedFor` names the pod here,
//!   as it does on a real cluster too);
//! - a DRA driver is played by [`slice`]: the ResourceSlice its kubelet
//!   plugin would publish for a node, with the attributes the test gives;
//! - the scheduler is played by [`allocate`]: it writes a claim's
//!   `status.allocation` (the devices it picked) and `status.reservedFor`
//!   (the pod), as kube-scheduler's DRA plugin does before it binds the pod.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::kube::KubeApi;

/// The API group and version served.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// The approval a `*.k8s.io` group's CRD must name: DRA's KEP.
const APPROVED: &str = "https://github.com/kubernetes/enhancements/pull/4381";

fn string() -> Value {
    json!({"type": "string"})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn int64() -> Value {
    json!({"type": "integer", "format": "int64"})
}

fn timestamp() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn list(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

/// A list of `items` merged by `keys` (`+listType=map`).
fn map_list(items: Value, keys: &[&str]) -> Value {
    let mut l = list(items);
    l["x-kubernetes-list-type"] = json!("map");
    l["x-kubernetes-list-map-keys"] = json!(keys);
    l
}

fn strings() -> Value {
    list(string())
}

fn map(values: Value) -> Value {
    json!({"type": "object", "additionalProperties": values})
}

/// An object of `properties`, `required` ones required.
fn object(properties: Value, required: &[&str]) -> Value {
    let mut o = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        o["required"] = json!(required);
    }
    o
}

/// resource.Quantity: an integer or a string (`10Gi`).
fn quantity() -> Value {
    json!({"x-kubernetes-int-or-string": true,
           "anyOf": [{"type": "integer"}, {"type": "string"}]})
}

/// runtime.RawExtension: any object.
fn raw() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// core/v1 NodeSelector.
fn node_selector() -> Value {
    let requirement = object(
        json!({"key": string(), "operator": string(), "values": strings()}),
        &["key", "operator"],
    );
    let term = object(
        json!({"matchExpressions": list(requirement.clone()), "matchFields": list(requirement)}),
        &[],
    );
    object(
        json!({"nodeSelectorTerms": list(term)}),
        &["nodeSelectorTerms"],
    )
}

/// DeviceSelector: a CEL expression.
fn device_selector() -> Value {
    object(
        json!({"cel": object(json!({"expression": string()}), &["expression"])}),
        &[],
    )
}

/// OpaqueDeviceConfiguration.
fn opaque() -> Value {
    object(
        json!({"driver": string(), "parameters": raw()}),
        &["driver", "parameters"],
    )
}

/// DeviceToleration.
fn toleration() -> Value {
    object(
        json!({"key": string(), "operator": string(), "value": string(),
               "effect": string(), "tolerationSeconds": int64()}),
        &[],
    )
}

/// ExactDeviceRequest's fields, and DeviceSubRequest's (which has a name).
fn request_fields(named: bool) -> Value {
    let mut fields = json!({
        "deviceClassName": string(), "selectors": list(device_selector()),
        "allocationMode": string(), "count": int64(), "tolerations": list(toleration()),
        "capacity": object(json!({"requests": map(quantity())}), &[]),
    });
    if named {
        fields["name"] = string();
    } else {
        fields["adminAccess"] = boolean();
    }
    fields
}

/// ResourceClaimSpec.
fn claim_spec() -> Value {
    let request = object(
        json!({
            "name": string(),
            "exactly": object(request_fields(false), &["deviceClassName"]),
            "firstAvailable": list(object(request_fields(true), &["name", "deviceClassName"])),
        }),
        &["name"],
    );
    let constraint = object(
        json!({"requests": strings(), "matchAttribute": string(), "distinctAttribute": string()}),
        &[],
    );
    let config = object(json!({"requests": strings(), "opaque": opaque()}), &[]);
    object(
        json!({"devices": object(json!({
            "requests": list(request), "constraints": list(constraint), "config": list(config),
        }), &[])}),
        &[],
    )
}

/// ResourceClaimStatus.
fn claim_status() -> Value {
    let result = object(
        json!({
            "request": string(), "driver": string(), "pool": string(), "device": string(),
            "adminAccess": boolean(), "tolerations": list(toleration()),
            "bindingConditions": strings(), "bindingFailureConditions": strings(),
            "shareID": string(), "consumedCapacity": map(quantity()),
        }),
        &["request", "driver", "pool", "device"],
    );
    let config = object(
        json!({"source": string(), "requests": strings(), "opaque": opaque()}),
        &["source"],
    );
    let allocation = object(
        json!({
            "devices": object(json!({"results": list(result), "config": list(config)}), &[]),
            "nodeSelector": node_selector(),
            "allocationTimestamp": timestamp(),
        }),
        &[],
    );
    let consumer = object(
        json!({"apiGroup": string(), "resource": string(), "name": string(), "uid": string()}),
        &["resource", "name", "uid"],
    );
    let condition = object(
        json!({"type": string(), "status": string(), "observedGeneration": int64(),
               "lastTransitionTime": timestamp(), "reason": string(), "message": string()}),
        &["type", "status", "lastTransitionTime", "reason", "message"],
    );
    let device = object(
        json!({
            "driver": string(), "pool": string(), "device": string(), "shareID": string(),
            "conditions": list(condition), "data": raw(),
            "networkData": object(json!({"interfaceName": string(), "ips": strings(),
                                         "hardwareAddress": string()}), &[]),
        }),
        &["driver", "pool", "device"],
    );
    object(
        json!({"allocation": allocation, "reservedFor": list(consumer),
               // +listType=map: drivers write their own entries (server-side apply).
               "devices": map_list(device, &["driver", "device", "pool"])}),
        &[],
    )
}

/// Counters by name (a CounterSet's, a DeviceCounterConsumption's).
fn counters() -> Value {
    map(object(json!({"value": quantity()}), &["value"]))
}

/// ResourceSliceSpec.
fn slice_spec() -> Value {
    let attribute = object(
        json!({"int": int64(), "bool": boolean(), "string": string(), "version": string()}),
        &[],
    );
    let capacity = object(
        json!({
            "value": quantity(),
            "requestPolicy": object(json!({
                "default": quantity(), "validValues": list(quantity()),
                "validRange": object(json!({"min": quantity(), "max": quantity(),
                                            "step": quantity()}), &["min"]),
            }), &[]),
        }),
        &["value"],
    );
    let taint = object(
        json!({"key": string(), "value": string(), "effect": string(), "timeAdded": timestamp()}),
        &["key", "effect"],
    );
    let device = object(
        json!({
            "name": string(), "attributes": map(attribute), "capacity": map(capacity),
            "consumesCounters": list(object(json!({"counterSet": string(), "counters": counters()}),
                                            &["counterSet", "counters"])),
            "nodeName": string(), "nodeSelector": node_selector(), "allNodes": boolean(),
            "taints": list(taint), "bindsToNode": boolean(), "bindingConditions": strings(),
            "bindingFailureConditions": strings(), "allowMultipleAllocations": boolean(),
        }),
        &["name"],
    );
    object(
        json!({
            "driver": string(),
            "pool": object(json!({"name": string(), "generation": int64(),
                                  "resourceSliceCount": int64()}),
                           &["name", "generation", "resourceSliceCount"]),
            "nodeName": string(), "nodeSelector": node_selector(), "allNodes": boolean(),
            "perDeviceNodeSelection": boolean(), "devices": list(device),
            "sharedCounters": list(object(json!({"name": string(), "counters": counters()}),
                                          &["name", "counters"])),
        }),
        &["driver", "pool"],
    )
}

/// DeviceClassSpec.
fn class_spec() -> Value {
    object(
        json!({
            "selectors": list(device_selector()),
            "config": list(object(json!({"opaque": opaque()}), &[])),
            "extendedResourceName": string(),
        }),
        &[],
    )
}

/// One CRD of the group: `kind`, namespaced or not, its `spec` and, when
/// it has one, its `status` (a status subresource, as the built-in type).
fn crd(kind: &str, plural: &str, namespaced: bool, spec: Value, status: Option<Value>) -> Value {
    let mut properties = json!({
        "apiVersion": string(), "kind": string(), "metadata": {"type": "object"}, "spec": spec,
    });
    let mut version = json!({"name": "v1", "served": true, "storage": true});
    if let Some(status) = status {
        properties["status"] = status;
        version["subresources"] = json!({"status": {}});
    }
    version["schema"] = json!({"openAPIV3Schema": object(properties, &["spec"])});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.resource.k8s.io"),
                     "annotations": {"api-approved.kubernetes.io": APPROVED}},
        "spec": {
            "group": "resource.k8s.io",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [version],
        },
    })
}

/// The four CRDs, as one `List` manifest.
pub fn crds() -> String {
    let template_spec = object(json!({"metadata": raw(), "spec": claim_spec()}), &["spec"]);
    json!({"apiVersion": "v1", "kind": "List", "items": [
        crd("DeviceClass", "deviceclasses", false, class_spec(), None),
        crd("ResourceClaim", "resourceclaims", true, claim_spec(), Some(claim_status())),
        crd("ResourceClaimTemplate", "resourceclaimtemplates", true, template_spec, None),
        crd("ResourceSlice", "resourceslices", false, slice_spec(), None),
    ]})
    .to_string()
}

/// Serve `resource.k8s.io/v1` on `api` ([`crds`]), once per API server
/// and test binary, and wait until the API server serves it.
pub fn serve(api: &KubeApi) {
    // Keyed by the server: a test may run its own beside the shared one.
    static SERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut served = SERVED.lock().unwrap_or_else(|e| e.into_inner());
    if served.insert(api.port) {
        api.apply(&crds());
        for plural in [
            "deviceclasses",
            "resourceclaims",
            "resourceclaimtemplates",
            "resourceslices",
        ] {
            api.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{plural}.resource.k8s.io"),
            ]);
        }
        // Established is the CRD's; discovery may lag it a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while api
            .kubectl_output(&["get", "resourceslices.resource.k8s.io"], None)
            .status
            .code()
            != Some(0)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "resource.k8s.io/v1 not served"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A device of a slice with the Multus contract's attributes
/// (`k8s.cni.cncf.io/deviceID`, `k8s.cni.cncf.io/resourceName`), and more.
pub fn network_device(name: &str, device_id: &str, resource_name: &str) -> Value {
    json!({"name": name, "attributes": {
        "k8s.cni.cncf.io/deviceID": {"string": device_id},
        "k8s.cni.cncf.io/resourceName": {"string": resource_name},
        "example.com/numaNode": {"int": 0},
    }})
}

/// The ResourceSlice a DRA driver `driver` publishes for `node`: one pool
/// named after the node, generation 1, of `devices`.
pub fn slice(name: &str, driver: &str, node: &str, devices: &[Value]) -> String {
    json!({
        "apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    })
    .to_string()
}

/// A ResourceClaim `namespace/name` asking for `count` devices of the
/// DeviceClass `class` (request `net`).
pub fn claim(namespace: &str, name: &str, class: &str, count: u32) -> String {
    json!({
        "apiVersion": API_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {
            "deviceClassName": class, "allocationMode": "ExactCount", "count": count}}]}},
    })
    .to_string()
}

/// A device the scheduler picked: (driver, pool, device).
pub type Pick<'a> = (&'a str, &'a str, &'a str);

/// The status the scheduler writes: `devices` allocated (for the claim's
/// request `net`) and the claim reserved for pod `pod` (name, uid).
pub fn allocated(devices: &[Pick], pod: (&str, &str)) -> Value {
    let results: Vec<Value> = devices
        .iter()
        .map(|(driver, pool, device)| {
            json!({"request": "net", "driver": driver, "pool": pool, "device": device})
        })
        .collect();
    json!({
        "allocation": {"devices": {"results": results}},
        "reservedFor": [{"resource": "pods", "name": pod.0, "uid": pod.1}],
    })
}

/// Write `status` as claim `namespace/claim`'s, one merge PATCH of its
/// status subresource.
pub fn write_status(api: &KubeApi, namespace: &str, claim: &str, status: &Value) {
    api.kubectl(&[
        "patch",
        "resourceclaims.resource.k8s.io",
        claim,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({ "status": status }).to_string(),
    ]);
}

/// The scheduler's part: claim `namespace/claim` allocated `devices` and
/// reserved for pod `pod` (name, uid), in one write ([`allocated`]).
pub fn allocate(api: &KubeApi, namespace: &str, claim: &str, devices: &[Pick], pod: (&str, &str)) {
    write_status(api, namespace, claim, &allocated(devices, pod));
}

/// Bad input no scheduler writes (a 1.34 server refuses it): claim
/// `namespace/claim` of one device, reserved for pod `pod` (name, uid) but
/// not allocated.
pub fn reserved_unallocated(api: &KubeApi, namespace: &str, claim_name: &str, pod: (&str, &str)) {
    api.apply(&claim(namespace, claim_name, "net", 1));
    let mut status = allocated(&[], pod);
    if let Some(status) = status.as_object_mut() {
        status.remove("allocation");
    }
    write_status(api, namespace, claim_name, &status);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crds_are_structural_objects_of_the_group() {
        let list: Value = serde_json::from_str(&crds()).unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 4);
        for crd in items {
            assert_eq!(crd["spec"]["group"], "resource.k8s.io");
            assert_eq!(
                crd["metadata"]["annotations"]["api-approved.kubernetes.io"],
                APPROVED
            );
        }
        let claim = &items[1]["spec"]["versions"][0];
        assert_eq!(claim["subresources"], json!({"status": {}}));
        let result = &claim["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
            ["allocation"]["properties"]["devices"]["properties"]["results"]["items"];
        assert_eq!(
            result["required"],
            json!(["request", "driver", "pool", "device"])
        );
    }
}
