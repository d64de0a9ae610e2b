//! Generates the gRPC code for cluster-autoscaler's externalgrpc protocol
//! (proto/externalgrpc.proto) with a pure-Rust protobuf compiler (protox),
//! so no protoc is needed to build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["externalgrpc.proto"], ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
