#include "sandbox/elf_symbols.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

namespace kforge::sandbox {

namespace {

struct image {
  std::string bytes;
  // Copies a T from offset `off`; false if it would read past the end.
  template <class T>
  bool get(std::uint64_t off, T& out) const {
    if (off > bytes.size() || bytes.size() - off < sizeof(T)) return false;
    std::memcpy(&out, bytes.data() + off, sizeof(T));
    return true;
  }
  std::string str(std::uint64_t table_off, std::uint64_t table_size, std::uint32_t idx) const {
    if (idx >= table_size || table_off + idx >= bytes.size()) return {};
    const char* p = bytes.data() + table_off + idx;
    const std::size_t limit =
        std::min<std::uint64_t>(table_size - idx, bytes.size() - table_off - idx);
    return std::string(p, strnlen(p, limit));
  }
};

struct symbol {
  std::string name;
  Elf64_Sym sym;
};

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

}  // namespace

result<elf_summary> read_elf_summary(const std::string& path) {
  image img;
  {
    std::ifstream f(path, std::ios::binary);
    if (!f) return error{path + ": cannot open"};
    img.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  Elf64_Ehdr eh{};
  if (!img.get(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return error{path + ": not an ELF file"};
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return error{path + ": not a 64-bit little-endian ELF file"};
  if (eh.e_shentsize != sizeof(Elf64_Shdr)) return error{path + ": unexpected section header size"};

  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (std::size_t i = 0; i < sections.size(); ++i)
    if (!img.get(eh.e_shoff + i * sizeof(Elf64_Shdr), sections[i]))
      return error{path + ": section header " + std::to_string(i) + " is past the end"};

  auto read_symbols = [&](std::uint32_t type) {
    std::vector<symbol> out;
    for (const auto& s : sections) {
      if (s.sh_type != type || s.sh_link >= sections.size()) continue;
      const auto& strtab = sections[s.sh_link];
      for (std::uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym{};
        if (!img.get(s.sh_offset + off, sym)) break;
        out.push_back({img.str(strtab.sh_offset, strtab.sh_size, sym.st_name), sym});
      }
    }
    return out;
  };
  const auto dynsym = read_symbols(SHT_DYNSYM);
  const auto symtab = read_symbols(SHT_SYMTAB);

  elf_summary out;
  for (const auto& s : dynsym) {
    if (s.name.empty()) continue;
    const unsigned bind = ELF64_ST_BIND(s.sym.st_info);
    if (s.sym.st_shndx == SHN_UNDEF) {
      out.imported.push_back(s.name);
      if (bind == STB_WEAK) out.weak_imported.push_back(s.name);
    } else if ((bind == STB_GLOBAL || bind == STB_WEAK) &&
               ELF64_ST_TYPE(s.sym.st_info) == STT_FUNC) {
      out.exported_functions.push_back(s.name);
    }
  }

  // Relocations by the address they patch: in a shared library the init arrays hold relative
  // relocations whose addend is the function's address.
  std::map<std::uint64_t, std::uint64_t> patched;
  for (const auto& s : sections) {
    if (s.sh_type != SHT_RELA) continue;
    for (std::uint64_t off = 0; off + sizeof(Elf64_Rela) <= s.sh_size; off += sizeof(Elf64_Rela)) {
      Elf64_Rela r{};
      if (!img.get(s.sh_offset + off, r)) break;
      const std::uint64_t sym = ELF64_R_SYM(r.r_info);
      const std::uint64_t base = sym != 0 && sym < dynsym.size() ? dynsym[sym].sym.st_value : 0;
      patched[r.r_offset] = base + static_cast<std::uint64_t>(r.r_addend);
    }
  }
  auto name_of = [&](std::uint64_t addr) {
    for (const auto* table : {&symtab, &dynsym})
      for (const auto& s : *table)
        if (s.sym.st_value == addr && ELF64_ST_TYPE(s.sym.st_info) == STT_FUNC && !s.name.empty())
          return s.name;
    return hex(addr);
  };
  for (const auto& s : sections) {
    const bool init = s.sh_type == SHT_INIT_ARRAY || s.sh_type == SHT_PREINIT_ARRAY;
    if (!init && s.sh_type != SHT_FINI_ARRAY) continue;
    for (std::uint64_t off = 0; off + 8 <= s.sh_size; off += 8) {
      std::uint64_t target = 0;
      if (auto it = patched.find(s.sh_addr + off); it != patched.end()) {
        target = it->second;
      } else if (!img.get(s.sh_offset + off, target)) {
        return error{path + ": init/fini array past the end of the file"};
      }
      if (target == 0 || target == ~std::uint64_t{0}) continue;  // unused slots
      (init ? out.init_functions : out.fini_functions).push_back(name_of(target));
    }
  }
  return out;
}

}  // namespace kforge::sandbox
