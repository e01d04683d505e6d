//! Events on the pod, as operators read them with `kubectl describe pod`: a
//! Normal one per attachment, a Warning for an ignored selection annotation
//! and for a failed attachment. Best effort: an event never fails an ADD.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::netattach::pod::Pod;

/// The component events are reported as.
const EVENT_SOURCE: &str = "plexus";

/// What kind of event, as `kubectl describe pod` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub event_type: EventType,
    /// CamelCase, as Kubernetes reasons are: `AddedInterface`.
    pub reason: &'static str,
    pub message: String,
}

/// The core/v1 Event `e` about `pod`, as kubelet's own events look (1.20
/// serves core/v1 events; `kubectl describe pod` lists them).
pub(super) fn pod_event(pod: &Pod, e: &PodEvent) -> Event {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pod.name)),
            namespace: Some(pod.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.uid.clone(),
            ..Default::default()
        },
        type_: Some(e.event_type.as_str().into()),
        reason: Some(e.reason.into()),
        message: Some(e.message.clone()),
        source: Some(EventSource {
            component: Some(EVENT_SOURCE.into()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    }
}
