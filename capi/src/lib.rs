//! The only `extern "C"` surface of tandem: ggml's dynamic-backend ABI. It arrives with the
//! plugin; until then this crate builds the cdylib with no exports.
