-- Tutorial 5 on a small text file with a tiny model: the three runs print
-- their validation losses, the packed model is exported (to --export) and
-- loaded, both models generate and their tokens/s are printed, the 2:8
-- model packed gives its own val loss; a bad option exits with status 2 and
-- a missing text file with status 1 and its name.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"

local exe = os.getenv("VENOM_EXE") or arg[-1]
local tmp = testutil.text_file()

local function tutorial(args)
  return testutil.run(("'%s' tutorials/05-bitnet.lua --steps 8 --batch-size 4 --block-size 16 "
    .. "--n-layer 1 --n-head 2 --n-embd 16 --eval-every 4 --eval-batches 2 --gen-tokens 8 %s"):format(exe, args))
end

local export = tmp .. ".ternary"
-- --gen-tokens 0 (the default): the 12 bytes that fit the 16-byte window after "The "
local out, rc = tutorial("--text " .. tmp .. " --export " .. export .. " --gen-tokens 0")
tap.is(rc, 0, "a run of the three models" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("f32 +step +4 .* val loss %d") ~= nil and out:find("bitnet +step +8 .* val loss %d") ~= nil,
  "validation losses of the f32 and the BitNet run")
tap.ok(out:find("packed ternary model: %d+ bytes") ~= nil and out:find("%-%-%- packed ternary sample %-%-%-\nThe ") ~= nil,
  "the packed model is loaded and generates after the prompt")
local bit, packed = out:match("BitNet b1%.58 ([%d.]+) %([^)]*%), packed ([%d.]+)")
tap.ok(bit and math.abs(tonumber(bit) - tonumber(packed)) < 1e-3 * tonumber(bit),
  "the packed model's val loss is the BitNet model's on the same batches")
tap.ok(out:find("bitnet2:8 step +8 .* val loss %d") ~= nil, "validation losses of the BitNet 2:8 run")
-- the BitNet runs start from larger embeddings (--bitnet-emb-std 0.2), the f32 run from 0.02
local e32, ebit = out:match("f32: %d+ parameters, token embeddings of std ([%d.]+)\n.-\nbitnet: %d+ parameters, token embeddings of std ([%d.]+)")
tap.ok(e32 and math.abs(tonumber(e32) - 0.02) < 0.003 and math.abs(tonumber(ebit) - 0.2) < 0.03,
  ("the BitNet runs' embeddings start at --bitnet-emb-std 0.2, f32's at 0.02 (%s, %s)"):format(tostring(e32), tostring(ebit)))
local sp, spacked = out:match("BitNet 64:2:8 %(ternary V:N:M MLPs%) ([%d.]+) %([^)]*%), packed ([%d.]+)")
tap.ok(sp and math.abs(tonumber(sp) - tonumber(spacked)) < 1e-3 * tonumber(sp),
  "the 2:8 model with packed MLPs has the val loss it trained to")
tap.ok(out:find("generation of 12 bytes %(median of 9%): f32 [%d.]+ tokens/s, packed ternary [%d.]+ tokens/s") ~= nil,
  "tokens/s of both models")
local ef = io.open(export, "rb")
tap.ok(ef ~= nil and ef:read(8) ~= nil, "--export wrote the packed file")
if ef then ef:close() end
os.remove(export)
out, rc = tutorial("--text " .. tmp .. " --sparse 2:8")
tap.is(rc, 2, "--sparse that is not V:2:M exits with status 2")
out, rc = tutorial("--text " .. tmp .. " --gen-tokens 0 --prompt 0123456789abcdef")
tap.ok(rc == 2 and out:find("%-%-prompt %(16 bytes%) fills the %-%-block%-size window %(16%)") ~= nil,
  "--gen-tokens 0 with a prompt that fills the window exits with status 2" .. (rc ~= 2 and ": " .. out or ""))
out, rc = tutorial("--text " .. tmp .. " --bitnet-emb-std 0")
tap.is(rc, 2, "--bitnet-emb-std 0 exits with status 2")
out, rc = tutorial("--text " .. tmp .. " --n-embd 15")
tap.is(rc, 2, "--n-embd not a multiple of --n-head exits with status 2")
out, rc = tutorial("--text " .. tmp .. ".missing")
tap.ok(rc == 1 and out:find("cannot open .*missing") ~= nil, "a missing text file exits with status 1 and is named")
os.remove(tmp)
tap.done()
