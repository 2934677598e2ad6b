//! Prints the FournosCluster CRD: `cargo run -p hearth-api --bin crdgen > manifests/crd.yaml`.

fn main() {
    match hearth_api::crd::fournos_cluster_crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(e) => {
            eprintln!("crdgen: cannot serialize the CRD: {e}");
            std::process::exit(1);
        }
    }
}
