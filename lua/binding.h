/* binding.h — what the venom executable needs from the Lua binding. */
#ifndef VENOM_BINDING_H
#define VENOM_BINDING_H

#include <lua.h>

#ifndef VENOM_VERSION
#define VENOM_VERSION "0.1.0"
#endif

/* Opens the venom.core module (tensors over the vn_* API) and leaves its
 * table on the stack. `require "venom.core"` calls it. */
int luaopen_venom_core(lua_State *L);

#endif
