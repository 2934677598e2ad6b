//! Keeping watch caches small. A cached object's `managedFields` (one entry per field
//! manager, each a JSON tree of the fields it owns) is most of its size, and no
//! controller reads it: strip it as each object enters a cache.

use kube::Resource;

/// Drops `metadata.managedFields`; for `WatchStreamExt::modify` before `reflect`.
pub fn strip_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use super::*;

    #[test]
    fn only_managed_fields_go() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("hearth".into()),
            ..Default::default()
        }]);
        strip_managed_fields(&mut cm);
        assert_eq!(cm.metadata.managed_fields, None);
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
    }
}
