-- The bench scripts' bad options: each exits with status 2 and one
-- `error:` line (util.parse_cli), no Lua traceback, before any data loads.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"

local exe = os.getenv("VENOM_EXE") or arg[-1]

local cases = {
  { "--bogus 1", "unknown option %-%-bogus" },
  { "--profile-steps 0", "%-%-profile%-steps must be a whole number >= 1, got 0" },
  { "--steps 0", "%-%-steps must be a whole number >= 1, got 0" },
  { "--warmup -1", "%-%-warmup must be a whole number >= 0, got %-1" },
  { "--top 1.5", "%-%-top must be a whole number >= 1, got 1%.5" },
  { "--steps abc", "%-%-steps" },
  { "--bogus 3", "bogus" },
  { "--sparse 64:4:8", "%-%-sparse must be a V:2:M pattern" },
  { "--sparse 0:2:8", "%-%-sparse must be a V:2:M pattern" },
  { "--sparse 64:2:2", "%-%-sparse must be a V:2:M pattern" },
  { "--sparse 64:2:3", "%-%-sparse must be a V:2:M pattern %(V >= 1, M >= 4%)" },
  { "--sparse banana", "%-%-sparse must be a V:2:M pattern" },
  { "--n-embd 100 --n-head 3", "%-%-n%-embd %(100%) must be a multiple of %-%-n%-head %(3%)" },
  { "stray", "stray" },
}
for _, c in ipairs(cases) do c[1] = "gpt.lua " .. c[1] end
for _, c in ipairs({
  { "bitnet_recipe.lua --steps 0", "%-%-steps must be a whole number >= 1, got 0" },
  { "checkpoint.lua --repeats 0", "%-%-repeats must be a whole number >= 1, got 0" },
  { "cnn.lua --device cuda" .. (require("venom").cuda.is_available() and "x" or ""), "%-%-device" },
  { "cnn.lua --width 0", "%-%-width must be a whole number >= 1, got 0" },
  { "epoch.lua --epochs 0", "%-%-epochs must be a whole number >= 1, got 0" },
  { "gmp_step.lua --rounds 0", "%-%-rounds must be a whole number >= 1, got 0" },
  { "gpt_activations.lua --bogus 1", "unknown option %-%-bogus" },
  { "image_folder.lua --batch 0", "%-%-batch must be a whole number >= 1, got 0" },
  { "moe_layer.lua --experts 1", "%-%-experts must be a whole number >= 2, got 1" },
  { "moe_placement.lua --every 0", "%-%-every must be a whole number >= 1, got 0" },
  { "sparse_layer.lua --device tpu", "%-%-device must be cpu or cuda, got tpu" },
  { "ternary_generate.lua --widths abc", "%-%-widths must be comma%-separated whole numbers" },
  { "ternary_generate.lua --tokens x", "%-%-tokens" },
}) do cases[#cases + 1] = c end
for _, c in ipairs(cases) do
  local p = io.popen(("'%s' bench/%s 2>&1; echo \"rc=$?\""):format(exe, c[1]))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  local first = out:match("^[^\n]*")
  tap.ok(rc == 2 and first:find("^error: ") and first:find(c[2]) and not out:find("traceback"),
         ("bench/%s: exit 2 with a clear error at once (%s, rc %s)"):format(c[1], first,
           tostring(rc)))
end
tap.done()
