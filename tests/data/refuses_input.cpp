// A hw4 whose check of its input file is wrong: feof() right after reading exactly the data is
// never set (only a read that hits the end sets it), so every well-formed input is refused.
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) { std::fprintf(stderr, "hw4: %s: cannot open\n", argv[1]); return 2; }
  int head[3];
  if (std::fread(head, sizeof(int), 3, f) != 3) { std::fprintf(stderr, "hw4: %s: short header\n", argv[1]); return 2; }
  const size_t n = (size_t)head[0] * head[1] * head[2] * 3;
  std::vector<float> data(n);
  if (std::fread(data.data(), sizeof(float), n, f) != n) { std::fprintf(stderr, "hw4: %s: file too short\n", argv[1]); return 2; }
  if (!std::feof(f)) { std::fprintf(stderr, "hw4: %s: file longer than 12 + 12*B*N*d bytes\n", argv[1]); return 2; }
  std::fclose(f);
  return 0;
}
