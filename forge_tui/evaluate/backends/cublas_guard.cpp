// Linked into every cuda candidate that includes cuBLAS: the candidate's calls to
// cublasCreate_v2 / cublasSetStream_v2 / cublasLtMatmul are renamed (objcopy
// --redefine-sym) to the forge_* functions below, which check the stream against the one
// the harness gives forge_launch and then call the real library. See binary.py / launch.py.
#include <cstddef>
#include <cstdint>

extern "C" {
int cublasCreate_v2(void** handle);
int cublasSetStream_v2(void* handle, void* stream);
int cublasGetStream_v2(void* handle, void** stream);
int cublasLtMatmul(void* h, void* desc, const void* alpha, const void* A, void* Adesc, const void* B, void* Bdesc,
                   const void* beta, const void* C, void* Cdesc, void* D, void* Ddesc, const void* algo,
                   void* workspace, size_t workspaceSize, void* stream);

static void* expected_stream = nullptr;
static void* bad_stream = nullptr;
static int violations = 0;
static void* handles[64];
static int n_handles = 0;

__attribute__((visibility("default"))) void forge_guard_expect(void* stream) { expected_stream = stream; }

// 0 when every cuBLAS call so far used the given stream, else how many did not; *stream: the last bad one
__attribute__((visibility("default"))) int forge_guard_violations(void** stream) {
    for (int i = 0; i < n_handles; ++i) {
        void* s = nullptr;
        if (cublasGetStream_v2(handles[i], &s) == 0 && s != expected_stream) {
            ++violations;
            bad_stream = s;
        }
    }
    if (stream) *stream = bad_stream;
    return violations;
}

int forge_cublasCreate_v2(void** handle) {
    int rc = cublasCreate_v2(handle);
    if (rc == 0 && handle && n_handles < 64) handles[n_handles++] = *handle;
    return rc;
}

int forge_cublasSetStream_v2(void* handle, void* stream) {
    if (stream != expected_stream) {
        ++violations;
        bad_stream = stream;
    }
    return cublasSetStream_v2(handle, stream);
}

int forge_cublasLtMatmul(void* h, void* desc, const void* alpha, const void* A, void* Adesc, const void* B,
                         void* Bdesc, const void* beta, const void* C, void* Cdesc, void* D, void* Ddesc,
                         const void* algo, void* workspace, size_t workspaceSize, void* stream) {
    if (stream != expected_stream) {
        ++violations;
        bad_stream = stream;
    }
    return cublasLtMatmul(h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                          workspaceSize, stream);
}
}
