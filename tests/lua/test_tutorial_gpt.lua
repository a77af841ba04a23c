-- Tutorial 3 on a small text file with a tiny model: a dense run and a
-- --sparse run succeed, report the losses, prune every MLP projection to
-- the pattern (with --sparse-attn the attention projections too) and print
-- a sample; a bad option exits with status 2 and a
-- missing text file with status 1 and its name; a --sparse run stopped
-- and resumed matches the uninterrupted one (a resume with another
-- effective --rewind is refused); --amp f16 on the CPU (matmuls
-- stay f32, the loss scaled by powers of two) prints the dense run's losses.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"

local exe = os.getenv("VENOM_EXE") or arg[-1]

local tmp = testutil.text_file()

local function tutorial(args)
  return testutil.run(("'%s' tutorials/03-tiny-gpt.lua --steps 12 --batch-size 4 --block-size 16 "
    .. "--n-layer 2 --n-head 2 --n-embd 16 --eval-every 6 --eval-batches 2 --sample 20 %s"):format(exe, args))
end

local out, rc = tutorial("--text " .. tmp)
tap.is(rc, 0, "dense run" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("step     6  train loss %d") ~= nil and out:find("step    12  train loss %d") ~= nil,
  "train and val losses at steps 6 and 12")
tap.ok(out:find("final val loss %d") ~= nil and out:find("tokens/s") ~= nil
  and out:find("--- sample ---\nThe ") ~= nil, "final loss, tokens/s and a sample after the prompt")

-- --rewind without --sparse: the dense control restarts the lr where the
-- sparse schedule's last event would be (after step 7): the same losses up
-- to step 6, other ones at step 12.
local dense = out
local rewound
rewound, rc = tutorial("--text " .. tmp .. " --rewind 1")
local function loss_at(s, step) return s:match(("step +%d  train loss ([%%d.]+)"):format(step)) end
tap.ok(rc == 0 and rewound:find("the lr restarts at 0.002 after step 7\n") ~= nil
  and loss_at(rewound, 6) == loss_at(dense, 6) and loss_at(rewound, 12) ~= loss_at(dense, 12)
  and not dense:find("the lr restarts"),
  "dense --rewind 1 restarts the lr after step 7: step 6 as the dense run, step 12 not; "
  .. "the dense default does not restart"
  .. (rc ~= 0 and ": " .. rewound or ""))

out, rc = tutorial("--text " .. tmp .. " --sparse 16:2:8")
tap.ok(rc == 0 and out:find("the lr restarts at 0.002 after step 7\n") ~= nil,
  "--sparse run, restarting the lr after the last event by default" .. (rc ~= 0 and ": " .. out or ""))
local pruned = 0
for _ in out:gmatch("blocks%.%d%.mlp%.%a+ +16:2:8 ") do pruned = pruned + 1 end
tap.is(pruned, 4, "--sparse 16:2:8: the report lists the 4 MLP projections at 16:2:8")

out, rc = tutorial("--text " .. tmp .. " --sparse 16:2:8 --sparse-attn --rewind 0")
pruned = 0
for _ in out:gmatch("blocks%.%d%.%a+%.%a+ +16:2:8 ") do pruned = pruned + 1 end
tap.ok(rc == 0 and pruned == 8 and out:find("pruning the MLPs and the attention projections") ~= nil
  and not out:find("the lr restarts"),
  "--sparse-attn: the report lists the 4 MLP and the 4 attention projections at 16:2:8 "
  .. "(--rewind 0: no restart)"
  .. (rc ~= 0 and ": " .. out or ""))
out, rc = tutorial("--text " .. tmp .. " --sparse-attn")
tap.ok(rc == 2 and out:find("give --sparse too", 1, true) ~= nil, "--sparse-attn without --sparse exits with status 2")

out, rc = tutorial("--text " .. tmp .. " --sparse 2:4")
tap.is(rc, 2, "--sparse 2:4 (not V:2:M) exits with status 2")
out, rc = tutorial("--text " .. tmp .. ".missing")
tap.ok(rc == 1 and out:find("cannot open .*missing") ~= nil,
  "a missing text file exits with status 1 and is named")
-- --save / --resume with --sparse, stopped at step 5, mid-way through the
-- pruning schedule (steps 2 to 7), with the lr restarting after step 7
-- (--rewind): the resumed run prints the same losses and ends with the
-- same checkpoint, byte for byte, as the run never stopped.
local slurp = testutil.slurp
local full, stopped, resumed = tmp .. ".full", tmp .. ".stopped", tmp .. ".resumed"
local sp = " --sparse 16:2:8 --rewind 1 --text " .. tmp
local want
want, rc = tutorial(sp .. " --save " .. full)
tap.is(rc, 0, "--sparse with --save" .. (rc ~= 0 and ": " .. want or ""))
tap.ok(want:find("the lr restarts at 0.002 after step 7\n") ~= nil, "--rewind 1 restarts the lr "
  .. "at --lr after the last pruning event")
out, rc = tutorial(sp .. " --save " .. stopped .. " --stop-after 5")
tap.ok(rc == 0 and out:find("stopped after step 5 of 12") ~= nil
  and not out:find("step    12"), "--stop-after 5 saves and stops" .. (rc ~= 0 and ": " .. out or ""))
out, rc = tutorial(sp .. " --save " .. resumed .. " --resume " .. stopped)
tap.ok(rc == 0 and out:find("resumed from .* after step 5") ~= nil,
  "--resume continues after step 5" .. (rc ~= 0 and ": " .. out or ""))
local function losses(s)
  local l = {}
  for line in s:gmatch("step +%d+  train loss [^\n]*") do l[#l + 1] = line end
  l[#l + 1] = s:match("final val loss [^\n]*")
  return table.concat(l, "\n")
end
tap.ok(losses(want):find("step    12  train loss %d.*final val loss %d") ~= nil
  and losses(out) == losses(want), "the resumed run prints the same losses at steps 6 and 12")
local a, b = slurp(full), slurp(resumed)
tap.ok(a and a == b, "its final checkpoint equals the uninterrupted run's, byte for byte")
out, rc = tutorial(sp .. " --steps 13 --resume " .. stopped)
tap.ok(rc == 1 and out:find("the run that wrote it had %-%-steps 12; this one has %-%-steps 13 ") ~= nil,
  "resuming with other --steps is refused")
out, rc = tutorial(sp .. " --sparse-attn --resume " .. stopped)
tap.ok(rc == 1 and out:find("had %-%-sparse%-attn false; this one has %-%-sparse%-attn true ") ~= nil,
  "resuming with --sparse-attn added is refused, naming the option")
out, rc = tutorial(sp .. " --steps 12 --lr 0.01 --resume " .. stopped)
tap.ok(rc == 1 and out:find("had %-%-lr 0%.002; this one has %-%-lr 0%.01 ") ~= nil,
  "resuming with another --lr is refused (it was ignored: the schedule came from the checkpoint)")
-- The --rewind a checkpoint records is the run's effective one: the
-- --sparse run stopped with --rewind 1 resumes without it (1 is --sparse's
-- default) to the same losses; a dense run's checkpoint (no restart: 0)
-- resumed with --rewind 1 given, and a dense --rewind 1 one resumed without
-- it (0 again), are refused naming --rewind.
out, rc = tutorial(" --sparse 16:2:8 --text " .. tmp .. " --resume " .. stopped)
tap.ok(rc == 0 and losses(out) == losses(want),
  "a --sparse checkpoint of --rewind 1 resumes with the default --rewind" .. (rc ~= 0 and ": " .. out or ""))
for _, c in ipairs({ { "", " --rewind 1", "had %-%-rewind 0; this one has %-%-rewind 1 " },
                     { " --rewind 1", "", "had %-%-rewind 1; this one has %-%-rewind 0 " } }) do
  tutorial("--text " .. tmp .. c[1] .. " --save " .. stopped .. " --stop-after 5")
  out, rc = tutorial("--text " .. tmp .. c[2] .. " --resume " .. stopped)
  local function shown(flag) return flag == "" and "out --rewind" or flag end
  tap.ok(rc == 1 and out:find(c[3]) ~= nil, ("a dense checkpoint written with%s, resumed with%s, is refused")
    :format(shown(c[1]), shown(c[2]))
    .. (rc ~= 1 and ": " .. out or ""))
end
os.remove(full); os.remove(stopped); os.remove(resumed)

-- The loss scaler's wiring: scaling by 2^16 and unscaling is exact, so the
-- f16 run on the CPU must print the plain run's losses, digit for digit.
local plain = tutorial("--text " .. tmp)
out, rc = tutorial("--text " .. tmp .. " --amp f16")
tap.ok(rc == 0 and out:find("f16 loss scale 65536 at the end, 0 steps skipped") ~= nil,
  "--amp f16 runs and reports its loss scale" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(losses(plain):find("final val loss %d") ~= nil and losses(out) == losses(plain),
  "--amp f16 on the CPU prints the same losses as the plain run")
tap.ok(out:find("note: --amp f16 changes only the GPU's matmuls", 1, true) ~= nil
  and not plain:find("note: --amp", 1, true), "--amp on the CPU says it keeps the matmuls f32")
out, rc = tutorial("--text " .. tmp .. " --amp f8")
tap.is(rc, 2, "--amp f8 exits with status 2")

os.remove(tmp)
tap.done()
