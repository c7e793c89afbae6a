// The hash-table part of SokLiteGatherForPeers on the GPU: one table's requested keys answered
// from a device hash table.
#ifndef SOK_LITE_KERNELS_TF_GPU_EXCHANGE_PEERS_HASH_TABLE_GPU_H_
#define SOK_LITE_KERNELS_TF_GPU_EXCHANGE_PEERS_HASH_TABLE_GPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/exchange.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// Every rank's keys of table t (handle input t) in one lookup step of the device table at input
// t, finding or creating rows; each rank's rows go to out + offsets[r * num_tables + t]. The
// table's row width must be dim ("<label>: dimension mismatch" otherwise, as on the CPU).
absl::Status AnswerPeersFromDeviceTable(tensorflow::OpKernelContext* ctx, int t,
                                        const std::string& label, int64_t dim,
                                        const int64_t* message, const ParsedIds& parsed,
                                        const std::vector<int64_t>& offsets, int64_t num_ranks,
                                        int64_t num_tables, float* out);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_EXCHANGE_PEERS_HASH_TABLE_GPU_H_
