//! Views: what a controller caches of a kind, as a type of its own.
//!
//! A cache of 1000 objects is most of a controller's heap, and a Kubernetes object
//! costs more than its fields: a `FournosCluster` is 1.2 kB before any string, a label
//! map is a 0.5 kB tree node even for one label, and a `Secret` holds its data in a map
//! too. A view keeps only the fields its controller reads, in the plainest types that
//! hold them, and is decoded from the watch as the full object and then converted (see
//! [`view_of!`](crate::view_of)), so an object that does not decode as the full kind is
//! still an error in the cache, as before.

/// Makes `$view` a [`kube::Resource`] of the same kind, group, version and scope as
/// `$kind` (whose dynamic type is `()`), read through its `metadata` field, and decodes
/// it as a `$kind` converted with `From<$kind>`.
#[macro_export]
macro_rules! view_of {
    ($view:ty, $kind:ty) => {
        impl ::kube::Resource for $view {
            type DynamicType = ();
            type Scope = <$kind as ::kube::Resource>::Scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::kind(&())
            }

            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::group(&())
            }

            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::version(&())
            }

            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::plural(&())
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $view {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                <$kind as ::serde::Deserialize>::deserialize(deserializer).map(<$view>::from)
            }
        }
    };
}

/// The metadata a view keeps: identity, version, age and deletion. Labels, annotations,
/// finalizers, owner references and managed fields are left to the view's own fields
/// (a label map costs half a kilobyte per object even with one label).
pub fn identity(
    meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::Resource as _;

    /// A view of a ConfigMap that keeps how many keys it has.
    #[derive(Clone, Debug, PartialEq)]
    struct Keys {
        metadata: ObjectMeta,
        keys: usize,
    }

    impl From<ConfigMap> for Keys {
        fn from(map: ConfigMap) -> Self {
            Self {
                keys: map.data.map_or(0, |d| d.len()),
                metadata: super::identity(map.metadata),
            }
        }
    }

    crate::view_of!(Keys, ConfigMap);

    #[test]
    fn a_view_is_its_kind_and_decodes_from_it() {
        assert_eq!(Keys::kind(&()), "ConfigMap");
        assert_eq!(Keys::api_version(&()), "v1");
        assert_eq!(Keys::plural(&()), "configmaps");
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "m",
                "namespace": "ns",
                "uid": "u",
                "resourceVersion": "7",
                "labels": {"a": "b"},
                "annotations": {"c": "d"},
                "managedFields": [{"manager": "x", "operation": "Apply"}],
            },
            "data": {"one": "1", "two": "2"},
        });
        let view: Keys = serde_json::from_value(json).unwrap();
        assert_eq!(view.keys, 2);
        assert_eq!(view.meta().name.as_deref(), Some("m"));
        assert_eq!(view.meta().resource_version.as_deref(), Some("7"));
        assert_eq!(view.meta().labels, None);
        assert_eq!(view.meta().annotations, None);
        assert_eq!(view.meta().managed_fields, None);
        // What does not decode as the kind does not decode as the view.
        let bad = serde_json::json!({"metadata": {"name": "m"}, "data": {"one": 1}});
        assert!(serde_json::from_value::<Keys>(bad).is_err());
    }
}
