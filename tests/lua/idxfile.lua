-- idxfile — writes small IDX files (the MNIST format) for the tests: a
-- 4-byte magic (0, 0, type 0x08 = u8, number of dims), big-endian sizes,
-- then the bytes.
local M = {}

function M.be32(v)
  return string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256,
    math.floor(v / 256) % 256, v % 256)
end

function M.write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- n images of 28×28 with a fixed byte pattern.
function M.images(n)
  local px = {}
  for i = 1, n * 28 * 28 do px[i] = string.char((i * 7) % 256) end
  return "\0\0\8\3" .. M.be32(n) .. M.be32(28) .. M.be32(28) .. table.concat(px)
end

-- Labels as given (0-based, as stored in the files).
function M.labels(list)
  local b = {}
  for i, v in ipairs(list) do b[i] = string.char(v) end
  return "\0\0\8\1" .. M.be32(#list) .. table.concat(b)
end

return M
