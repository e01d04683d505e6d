//! The messages of kubelet's gRPC APIs, generated from `proto/` by prost
//! with protox, a protobuf compiler in Rust: the build needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTOS: [&str; 4] = [
        "proto/podresources_v1.proto",
        "proto/deviceplugin_v1beta1.proto",
        "proto/dra_v1.proto",
        "proto/pluginregistration_v1.proto",
    ];
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
