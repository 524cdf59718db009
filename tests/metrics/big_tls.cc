// A shared library with 128 KiB of initial-exec TLS. glibc reserves static
// TLS for it inside every thread's stack, as it does for LibTorch with CUDA
// and the libraries beside it: a thread created with a small fixed stack
// (civetweb's 100 KiB workers) cannot start in such a process.

[[gnu::tls_model("initial-exec")]] thread_local char
    metalserve_test_big_tls[128 * 1024];

extern "C" char* MetalserveTestBigTls() { return metalserve_test_big_tls; }
