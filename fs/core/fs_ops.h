/*
 * fs_ops.h — inside the core: the operations (include/fs_core_ops.h, the
 * public part) with the core's state (fs_i.h).
 */
#ifndef FS_OPS_H
#define FS_OPS_H

#include "fs_core_ops.h"
#include "fs_i.h"

#endif
