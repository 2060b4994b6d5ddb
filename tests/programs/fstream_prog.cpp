// The C++ scenario: fstream (libstdc++ opens through fopen64 and then uses
// read/write/lseek on fileno()) and std::filesystem.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

int main()
{
	{
		std::ofstream out("cpp.txt");
		for (int i = 0; i < 500; i++) out << "value " << i * i << '\n';
	}
	{
		std::ofstream out("cpp.txt", std::ios::app);
		out << "appended\n";
	}
	{
		std::ifstream in("cpp.txt");
		std::string line, last;
		int n = 0;
		while (std::getline(in, line)) { n++; last = line; }
		std::cout << "lines " << n << " last '" << last << "'\n";
	}
	{
		std::fstream io("cpp.txt", std::ios::in | std::ios::out);
		io.seekp(6);
		io << "XYZ";
		io.seekg(0);
		std::string w;
		io >> w >> w;
		std::cout << "after seekp: " << w << " tellg " << io.tellg() << '\n';
	}
	{
		std::ofstream b("cpp.bin", std::ios::binary);
		for (int i = 0; i < 4096; i++) b.write(reinterpret_cast<const char *>(&i), sizeof i);
	}
	{
		std::ifstream b("cpp.bin", std::ios::binary | std::ios::ate);
		std::cout << "binary size " << b.tellg() << '\n';
		b.seekg(1000 * sizeof(int));
		int v = 0;
		b.read(reinterpret_cast<char *>(&v), sizeof v);
		std::cout << "binary[1000] " << v << '\n';
	}
	std::ifstream missing("no/such/file");
	std::cout << "missing is_open " << missing.is_open() << '\n';

	fs::create_directories("fsdir/a/b");
	fs::copy_file("cpp.txt", "fsdir/a/copy.txt");
	fs::copy("fsdir/a", "fsdir/a2", fs::copy_options::recursive);
	fs::rename("fsdir/a2/copy.txt", "fsdir/renamed.txt");
	fs::create_symlink("renamed.txt", "fsdir/link");
	std::cout << "file_size " << fs::file_size("fsdir/renamed.txt") << " is_symlink "
		  << fs::is_symlink("fsdir/link") << " read_symlink " << fs::read_symlink("fsdir/link") << '\n';
	std::vector<std::string> names;
	for (auto &e : fs::recursive_directory_iterator("fsdir")) names.push_back(e.path().string());
	std::sort(names.begin(), names.end());
	for (auto &n : names) std::cout << "entry " << n << '\n';
	std::cout << "remove_all " << fs::remove_all("fsdir/a2") << '\n';
	std::cout << "exists " << fs::exists("fsdir/a2") << " relative cwd "
		  << fs::relative(fs::current_path(), fs::current_path()) << '\n';
	return 0;
}
