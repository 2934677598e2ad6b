//! One page of a target's node list, decoded into only what GPU counting reads.
//!
//! A target is untrusted. Decoding its answer into full `Node` objects cost ~1.5 KB of
//! memory per `{}` item (3 bytes on the wire), so one target could take the whole
//! process down. Here every item becomes a [`NodeView`] holding only the GPU vendors'
//! labels and allocatable resources plus two flags; everything else is skipped without
//! being kept. A page with more items than were asked for, a node with more GPU
//! entries than any labeller writes, or an entry longer than the apiserver allows is
//! refused whole: a real apiserver never sends one.
//!
//! Memory of one decode is therefore bounded by the bytes of the page (capped by the
//! caller) plus `limit × MAX_GPU_ENTRIES` short strings, whatever the target sends.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Label keys GPU counting reads start with one of these (see `gpus.rs`).
const GPU_LABEL_PREFIXES: [&str; 7] = [
    "nvidia.com/gpu.",
    "nvidia.com/mig-",
    "nvidia.com/cuda.driver",
    "amd.com/gpu.product-name",
    "beta.amd.com/gpu.product-name",
    "amd.com/gpu.driver-version",
    "beta.amd.com/gpu.driver-version",
];
/// Allocatable resources GPU counting reads start with one of these.
const GPU_RESOURCE_PREFIXES: [&str; 3] = ["nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu"];
/// GPU labels (or GPU resources) kept per node at most. GPU Feature Discovery writes
/// ~20 `nvidia.com/gpu.*` labels and ~8 per MIG profile; 256 is several times that.
pub const MAX_GPU_ENTRIES: usize = 256;
/// Longest GPU label key or value, or resource name or quantity: a label key is at most
/// 253 + 1 + 63 characters, a value 63, so anything longer is not from an apiserver.
pub const MAX_ENTRY_CHARS: usize = 320;
/// Longest continue token taken from a page (the apiserver's are ~100–300 bytes).
pub const MAX_CONTINUE_CHARS: usize = 4096;

/// What Hearth reads of one Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Only labels under the GPU vendors' prefixes.
    pub labels: BTreeMap<String, String>,
    /// Only allocatable resources under the GPU vendors' prefixes, as quantity text.
    pub allocatable: BTreeMap<String, String>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// A `Ready` condition with status `True`.
    pub ready: bool,
}

impl From<&Node> for NodeView {
    /// The same view a decoded page gives, from a full Node (tests, fuzzing).
    fn from(node: &Node) -> Self {
        let keep = |map: Option<BTreeMap<String, String>>, prefixes: &[&str]| -> BTreeMap<_, _> {
            map.unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
                .collect()
        };
        let status = node.status.as_ref();
        let allocatable = status
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| a.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect());
        Self {
            labels: keep(node.metadata.labels.clone(), &GPU_LABEL_PREFIXES),
            allocatable: keep(allocatable, &GPU_RESOURCE_PREFIXES),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        }
    }
}

/// A decoded page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePage {
    pub nodes: Vec<NodeView>,
    /// `metadata.continue`, when more pages follow.
    pub continue_token: Option<String>,
}

/// Why a page was refused. The words are Hearth's; nothing of the page is quoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("it holds more than the {limit} nodes asked for")]
    TooManyItems { limit: u32 },
    #[error("a node has more than {MAX_GPU_ENTRIES} GPU labels or GPU resources")]
    TooManyGpuEntries,
    #[error("a GPU label or resource is longer than {MAX_ENTRY_CHARS} characters")]
    EntryTooLong,
    #[error("its continue token is longer than {MAX_CONTINUE_CHARS} characters")]
    ContinueTooLong,
    #[error("it is not a Kubernetes node list")]
    NotANodeList,
}

thread_local! {
    /// The refusal behind a decode error. serde's errors carry only text, and
    /// serde_json's text may quote the target; decoding is synchronous on one thread,
    /// so the visitors leave the typed reason here for [`decode_page`].
    static REFUSAL: Cell<Option<PageError>> = const { Cell::new(None) };
}

fn refuse<E: de::Error>(why: PageError) -> E {
    REFUSAL.with(|r| r.set(Some(why)));
    E::custom("refused")
}

/// Decodes one page of a node list asked for with `limit`.
pub fn decode_page(reader: impl Read, limit: u32) -> Result<NodePage, PageError> {
    REFUSAL.with(|r| r.set(None));
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = PageSeed { limit }
        .deserialize(&mut de)
        .and_then(|page| de.end().map(|()| page));
    let refusal = REFUSAL.with(Cell::take);
    result.map_err(|_| refusal.unwrap_or(PageError::NotANodeList))
}

struct PageSeed {
    limit: u32,
}

impl<'de> DeserializeSeed<'de> for PageSeed {
    type Value = NodePage;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NodePage, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PageSeed {
    type Value = NodePage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a node list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodePage, A::Error> {
        let mut page = NodePage::default();
        while let Some(key) = map.next_key::<PageField>()? {
            match key {
                PageField::Items => {
                    page.nodes = map.next_value_seed(Items { limit: self.limit })?;
                }
                PageField::Metadata => {
                    let meta: ListMeta = map.next_value()?;
                    page.continue_token = meta.continue_.filter(|t| !t.is_empty());
                }
                PageField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if let Some(token) = &page.continue_token
            && token.len() > MAX_CONTINUE_CHARS
        {
            return Err(refuse(PageError::ContinueTooLong));
        }
        Ok(page)
    }
}

/// A key of the list, compared without keeping it (serde's derived identifier matches
/// the borrowed text); `Other` for the keys Hearth skips.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum PageField {
    Items,
    Metadata,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// `items`, counted as they are decoded: the `limit + 1`-th item refuses the page
/// before it is decoded.
struct Items {
    limit: u32,
}

impl<'de> DeserializeSeed<'de> for Items {
    type Value = Vec<NodeView>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<NodeView>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for Items {
    type Value = Vec<NodeView>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of nodes")
    }

    fn visit_none<E: de::Error>(self) -> Result<Vec<NodeView>, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<NodeView>, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<NodeView>, A::Error> {
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        let mut nodes = Vec::new();
        loop {
            if nodes.len() == limit {
                // One more element is an error whatever it is; none ends the list.
                return match seq.next_element::<IgnoredAny>()? {
                    Some(_) => Err(refuse(PageError::TooManyItems { limit: self.limit })),
                    None => Ok(nodes),
                };
            }
            match seq.next_element::<Item>()? {
                Some(item) => nodes.push(item.into_view()),
                None => return Ok(nodes),
            }
        }
    }
}

#[derive(Deserialize)]
struct Item {
    metadata: Option<ItemMeta>,
    spec: Option<ItemSpec>,
    status: Option<ItemStatus>,
}

impl Item {
    fn into_view(self) -> NodeView {
        let status = self.status.unwrap_or_default();
        NodeView {
            labels: self.metadata.and_then(|m| m.labels).unwrap_or_default().0,
            allocatable: status.allocatable.unwrap_or_default().0,
            unschedulable: self.spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready: status.conditions.is_some_and(|c| c.0),
        }
    }
}

#[derive(Deserialize)]
struct ItemMeta {
    labels: Option<GpuEntries<true>>,
}

#[derive(Deserialize)]
struct ItemSpec {
    unschedulable: Option<bool>,
}

#[derive(Deserialize, Default)]
struct ItemStatus {
    allocatable: Option<GpuEntries<false>>,
    conditions: Option<Ready>,
}

/// A string map keeping only the GPU vendors' keys (label keys when `LABELS`, else
/// resource names), bounded in count and length.
#[derive(Default)]
struct GpuEntries<const LABELS: bool>(BTreeMap<String, String>);

impl<'de, const LABELS: bool> Deserialize<'de> for GpuEntries<LABELS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(Self::default())
    }
}

impl<'de, const LABELS: bool> Visitor<'de> for GpuEntries<LABELS> {
    type Value = Self;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self, A::Error> {
        let prefixes: &[&str] = if LABELS {
            &GPU_LABEL_PREFIXES
        } else {
            &GPU_RESOURCE_PREFIXES
        };
        while let Some(key) = map.next_key_seed(KeySeed(prefixes))? {
            let Some(key) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let value: String = map.next_value()?;
            if value.len() > MAX_ENTRY_CHARS {
                return Err(refuse(PageError::EntryTooLong));
            }
            if self.0.len() >= MAX_GPU_ENTRIES {
                return Err(refuse(PageError::TooManyGpuEntries));
            }
            self.0.insert(key, value);
        }
        Ok(self)
    }
}

/// A key starting with one of these prefixes; allocated only when kept.
struct KeySeed<'a>(&'a [&'a str]);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<String>, E> {
        if !self.0.iter().any(|p| key.starts_with(p)) {
            return Ok(None);
        }
        if key.len() > MAX_ENTRY_CHARS {
            return Err(refuse(PageError::EntryTooLong));
        }
        Ok(Some(key.to_owned()))
    }
}

/// `status.conditions`, folded into "is there a `Ready=True`" without keeping any.
struct Ready(bool);

impl<'de> Deserialize<'de> for Ready {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ready;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of conditions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ready, A::Error> {
                let mut ready = false;
                while let Some(c) = seq.next_element::<ConditionView>()? {
                    ready |= c.type_ == Some(Word::Ready) && c.status == Some(Word::True);
                }
                Ok(Ready(ready))
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Deserialize)]
struct ConditionView {
    #[serde(rename = "type")]
    type_: Option<Word>,
    status: Option<Word>,
}

/// A string compared against the two words Hearth looks for, never kept.
#[derive(Deserialize, PartialEq, Eq)]
#[serde(field_identifier)]
enum Word {
    Ready,
    True,
    #[serde(other)]
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::node;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn decode(value: serde_json::Value, limit: u32) -> Result<NodePage, PageError> {
        decode_page(value.to_string().as_bytes(), limit)
    }

    #[test]
    fn a_real_node_decodes_to_the_same_view_as_the_full_object() {
        let n = node("gpu-1")
            .nvidia("NVIDIA-A100-SXM4-80GB", 8)
            .label("kubernetes.io/hostname", "gpu-1")
            .allocatable("cpu", "64")
            .build();
        let page = decode(
            json!({
                "kind": "NodeList", "apiVersion": "v1",
                "metadata": { "resourceVersion": "12", "continue": "abc" },
                "items": [serde_json::to_value(&n).unwrap()],
            }),
            10,
        )
        .unwrap();
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        assert_eq!(page.nodes, vec![NodeView::from(&n)]);
        let view = &page.nodes[0];
        assert!(view.ready && !view.unschedulable);
        assert!(view.labels.contains_key("nvidia.com/gpu.product"));
        assert!(!view.labels.contains_key("kubernetes.io/hostname"));
        assert_eq!(view.allocatable.get("nvidia.com/gpu").unwrap(), "8");
        assert!(!view.allocatable.contains_key("cpu"));
    }

    #[test]
    fn cordoned_and_not_ready_nodes_are_seen_as_such() {
        let page = decode(
            json!({ "items": [
                { "spec": { "unschedulable": true },
                  "status": { "conditions": [{ "type": "Ready", "status": "True" }] } },
                { "status": { "conditions": [{ "type": "Ready", "status": "False" },
                                             { "type": "Other", "status": "True" }] } },
                { "metadata": null, "spec": null, "status": null },
            ]}),
            3,
        )
        .unwrap();
        let flags: Vec<(bool, bool)> = page
            .nodes
            .iter()
            .map(|n| (n.unschedulable, n.ready))
            .collect();
        assert_eq!(flags, [(true, true), (false, false), (false, false)]);
        assert_eq!(page.continue_token, None);
    }

    #[test]
    fn more_items_than_asked_for_refuse_the_page() {
        let items: Vec<_> = (0..5).map(|_| json!({})).collect();
        assert_eq!(decode(json!({ "items": items }), 5).unwrap().nodes.len(), 5);
        assert_eq!(
            decode(json!({ "items": items }), 4),
            Err(PageError::TooManyItems { limit: 4 })
        );
        // The limit is checked before the next item is decoded, whatever it is.
        assert_eq!(
            decode_page(br#"{"items":[{},{},"#.as_slice(), 1),
            Err(PageError::TooManyItems { limit: 1 })
        );
    }

    #[test]
    fn gpu_entries_are_bounded() {
        let many: serde_json::Map<_, _> = (0..=MAX_GPU_ENTRIES)
            .map(|i| (format!("nvidia.com/gpu.x{i}"), json!("1")))
            .collect();
        assert_eq!(
            decode(json!({ "items": [{ "metadata": { "labels": many } }] }), 1),
            Err(PageError::TooManyGpuEntries)
        );
        // Any number of labels Hearth does not read is skipped, not kept.
        let other: serde_json::Map<_, _> = (0..10 * MAX_GPU_ENTRIES)
            .map(|i| (format!("example.com/l{i}"), json!("1")))
            .collect();
        let page = decode(json!({ "items": [{ "metadata": { "labels": other } }] }), 1).unwrap();
        assert!(page.nodes[0].labels.is_empty());
        let long = "x".repeat(MAX_ENTRY_CHARS + 1);
        assert_eq!(
            decode(
                json!({ "items": [{ "metadata": { "labels": { "nvidia.com/gpu.product": long } } }] }),
                1
            ),
            Err(PageError::EntryTooLong)
        );
        assert_eq!(
            decode(
                json!({ "items": [{ "status": { "allocatable": { format!("nvidia.com/mig-{long}"): "1" } } }] }),
                1
            ),
            Err(PageError::EntryTooLong)
        );
        assert_eq!(
            decode(
                json!({ "metadata": { "continue": "c".repeat(MAX_CONTINUE_CHARS + 1) }, "items": [] }),
                1
            ),
            Err(PageError::ContinueTooLong)
        );
    }

    #[test]
    fn junk_is_not_a_node_list() {
        for junk in [
            &b"<html>not json</html>"[..],
            b"[]",
            b"{\"items\": 5}",
            b"{\"items\": [{\"metadata\": {\"labels\": {\"nvidia.com/gpu.product\": 7}}}]}",
            b"{\"items\": []} trailing",
            b"",
            b"\xff\xfe",
        ] {
            assert_eq!(
                decode_page(junk, 10),
                Err(PageError::NotANodeList),
                "{junk:?}"
            );
        }
    }
}
