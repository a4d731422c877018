// Per-thread error reporting behind opforge_last_error().
#pragma once

#include <string>

#include "opforge/opforge.h"

namespace opforge {

// Records `message` as this thread's last error and returns `status`, so a check can be
// written as `return fail(OPFORGE_ERROR_INVALID_ARGUMENT, "...")`.
opforge_status fail(opforge_status status, const std::string& message);

// Clears this thread's last error (called at the start of every op).
void clear_error();

}  // namespace opforge
